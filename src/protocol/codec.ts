/**
 * The value codec of the wire protocol: a hand-written CBOR (RFC 8949)
 * encoder and decoder for exactly the value table of `docs/PROTOCOL.md`.
 *
 * The encoder reuses one growable scratch buffer across calls and hands out a
 * fresh copy of the bytes it wrote; binary values of
 * {@linkcode ATTACHMENT_THRESHOLD_BYTES} and more are not copied at all but
 * returned as attachments, to be written after the head as they are. The
 * decoder is strict: anything that is not a well-formed head of this protocol
 * throws a {@linkcode ProtocolError}, and no claimed length is trusted before
 * it has been checked against the bytes that are really there.
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";

/** Binary values of at least this many bytes travel as attachments. */
export const ATTACHMENT_THRESHOLD_BYTES = 65536;

/** A value encoded for the wire: the CBOR head and the attachment area. */
export interface EncodedValue {
  /** The CBOR bytes of the value: a fresh copy the caller may keep. */
  head: Uint8Array;
  /**
   * Views on the caller's own binary data (no copy), in the order they are
   * referenced from the head; they are laid out back to back in the
   * attachment area.
   */
  attachments: Uint8Array[];
  /** The total byte length of `attachments`. */
  attachmentBytes: number;
}

/** Options of {@linkcode encodeValue}. */
export interface EncodeValueOptions {
  /**
   * Binary values of at least this many bytes are sent as attachments
   * instead of being copied into the head. `Infinity` keeps every value in
   * the head; a negative or non-numeric value throws a `RangeError`.
   *
   * @default {65536}
   */
  attachmentThresholdBytes?: number | undefined;
  /**
   * Bytes left free (zero) at the start of `head`, before the CBOR item, for
   * the caller to fill in (the frame header), so that head and header need
   * no second copy. At most 64.
   *
   * @default {0}
   */
  prefixBytes?: number | undefined;
}

/** Containers (arrays, objects, maps, sets, errors) nest at most this deep. */
const MAX_DEPTH = 512;
/** An error cause chain is cut after this many errors. */
const MAX_ERROR_CHAIN = 16;
/** The scratch buffer is dropped after an encode that grew it past this. */
const MAX_KEPT_SCRATCH_BYTES = 4 * 1024 * 1024;
const INITIAL_SCRATCH_BYTES = 16 * 1024;
/** Longest path shown in an error message, in characters. */
const MAX_PATH_CHARS = 240;

const TAG_DATE = 1;
const TAG_BIGNUM = 2;
const TAG_NEGATIVE_BIGNUM = 3;
const TAG_URL = 32;
const TAG_REGEXP = 35;
const TAG_SET = 258;
const TAG_MAP = 259;
const TAG_ATTACHMENT = 27000;
const TAG_ERROR = 27001;
const TAG_ARRAY_BUFFER = 27002;
const TAG_DATA_VIEW = 27003;
const TAG_CUSTOM = 27010;

const TWO_POW_32 = 0x100000000;
/** `hi` words below this give a 64-bit integer within the safe range. */
const SAFE_HI_LIMIT = 0x200000;

/** A typed array constructor, as far as the codec needs it. */
interface TypedArrayConstructor {
  readonly BYTES_PER_ELEMENT: number;
  readonly name: string;
  new (
    buffer: ArrayBufferLike,
    byteOffset: number,
    length: number,
  ): ArrayBufferView;
}

const FLOAT16_ARRAY = (globalThis as { Float16Array?: TypedArrayConstructor })
  .Float16Array;
const URL_CLASS: typeof URL | undefined = typeof URL === "function"
  ? URL
  : undefined;

/** RFC 8746 little-endian tags of the typed arrays other than Uint8Array. */
const TYPED_ARRAYS: readonly (readonly [
  number,
  string,
  TypedArrayConstructor | undefined,
])[] = [
  [68, "Uint8ClampedArray", Uint8ClampedArray],
  [69, "Uint16Array", Uint16Array],
  [70, "Uint32Array", Uint32Array],
  [71, "BigUint64Array", BigUint64Array],
  [72, "Int8Array", Int8Array],
  [77, "Int16Array", Int16Array],
  [78, "Int32Array", Int32Array],
  [79, "BigInt64Array", BigInt64Array],
  [84, "Float16Array", FLOAT16_ARRAY],
  [85, "Float32Array", Float32Array],
  [86, "Float64Array", Float64Array],
];
const TAG_BY_TYPED_ARRAY_NAME = new Map<string, number>(
  TYPED_ARRAYS.map(([tag, name]) => [name, tag]),
);
const TYPED_ARRAY_BY_TAG = new Map<number, TypedArrayConstructor | undefined>(
  TYPED_ARRAYS.map(([tag, , ctor]) => [tag, ctor]),
);

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const EMPTY_BYTES = new Uint8Array(0);
const EMPTY_VIEW = new DataView(EMPTY_BYTES.buffer);
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

// ---------------------------------------------------------------------------
// Encoder
// ---------------------------------------------------------------------------

/** Why a value cannot cross, and where it sits (built while unwinding). */
class Refusal extends Error {
  /** What was refused, with an article: `"a function"`. */
  readonly what: string;
  /** A short label for a placeholder: `"function"`. */
  readonly label: string;
  /** The path from the root, in segments (`.key`, `[1]`), prepended on unwind. */
  path = "";

  constructor(what: string, label: string) {
    super(what);
    this.name = "Refusal";
    this.what = what;
    this.label = label;
  }
}

const DEPTH_LABEL = "deeply nested value";

let buf = new Uint8Array(INITIAL_SCRATCH_BYTES);
let view = new DataView(buf.buffer);
let pos = 0;
let threshold = ATTACHMENT_THRESHOLD_BYTES;
let attachments: Uint8Array[] = [];
let attachmentBytes = 0;
/** The errors being encoded, outermost first (for cause chains and cycles). */
let errorStack: object[] = [];
let busy = false;

/**
 * Encodes a value (usually a message object) as a CBOR head plus the binary
 * values large enough to travel as attachments.
 *
 * Supported values are those of the table in `docs/PROTOCOL.md`: primitives,
 * arrays, plain objects, `Map`, `Set`, `Date`, `RegExp`, `URL`, errors,
 * `ArrayBuffer`, `DataView` and typed arrays (subclasses encode as their
 * built-in base, as with `structuredClone`). Symbol-keyed and non-enumerable
 * properties are left out, array holes become `undefined`, and strings with
 * lone surrogates get U+FFFD in their place (UTF-8 cannot carry them). An
 * error always crosses: a property of it that cannot is replaced by a string
 * such as `"[unserializable function]"`. An exception thrown by a getter
 * of the value propagates unchanged.
 *
 * @param value The value to encode.
 * @param options The attachment threshold.
 * @returns The head (a fresh copy) and the attachments (views, no copy).
 * @throws {TypeError} when the value holds something that cannot cross (a
 * function, a symbol, a promise, an instance of another class, a circular
 * reference, nesting deeper than 512); the message names the path, e.g.
 * `Cannot send args[1].onDone: a function cannot cross to a worker process`.
 * @throws {RangeError} when `attachmentThresholdBytes` is not a non-negative
 * number.
 */
export function encodeValue(
  value: unknown,
  options?: EncodeValueOptions,
): EncodedValue {
  const limit = options?.attachmentThresholdBytes ??
    ATTACHMENT_THRESHOLD_BYTES;
  if (typeof limit !== "number" || !(limit >= 0)) {
    throw new RangeError(
      `Cannot encode value: attachmentThresholdBytes must be a non-negative number, received ${
        String(limit)
      }`,
    );
  }
  // A getter that sends a value while we encode gets a scratch of its own.
  const outer = busy ? saveEncoderState() : undefined;
  if (outer !== undefined) {
    buf = new Uint8Array(INITIAL_SCRATCH_BYTES);
    view = new DataView(buf.buffer);
  }
  const prefix = options?.prefixBytes ?? 0;
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > 64) {
    throw new RangeError(
      `Cannot encode value: prefixBytes must be a whole number from 0 to 64, received ${
        String(prefix)
      }`,
    );
  }
  busy = true;
  buf.fill(0, 0, prefix);
  pos = prefix;
  threshold = limit;
  attachments = [];
  attachmentBytes = 0;
  errorStack = [];
  try {
    encodeAny(value, 1);
    return { head: buf.slice(0, pos), attachments, attachmentBytes };
  } catch (error: unknown) {
    if (error instanceof Refusal) throw refusalToTypeError(error, value);
    throw error;
  } finally {
    if (outer !== undefined) {
      restoreEncoderState(outer);
    } else {
      busy = false;
      attachments = [];
      errorStack = [];
      if (buf.length > MAX_KEPT_SCRATCH_BYTES) {
        buf = new Uint8Array(INITIAL_SCRATCH_BYTES);
        view = new DataView(buf.buffer);
      }
    }
  }
}

interface EncoderState {
  buf: Uint8Array<ArrayBuffer>;
  view: DataView<ArrayBuffer>;
  pos: number;
  threshold: number;
  attachments: Uint8Array[];
  attachmentBytes: number;
  errorStack: object[];
}

function saveEncoderState(): EncoderState {
  return {
    buf,
    view,
    pos,
    threshold,
    attachments,
    attachmentBytes,
    errorStack,
  };
}

function restoreEncoderState(state: EncoderState): void {
  buf = state.buf;
  view = state.view;
  pos = state.pos;
  threshold = state.threshold;
  attachments = state.attachments;
  attachmentBytes = state.attachmentBytes;
  errorStack = state.errorStack;
}

function grow(extra: number): void {
  const needed = pos + extra;
  let size = buf.length * 2;
  while (size < needed) size *= 2;
  const next = new Uint8Array(size);
  next.set(buf.subarray(0, pos));
  buf = next;
  view = new DataView(next.buffer);
}

/** Writes a major type and its argument (a non-negative integer up to 2^53). */
function writeHead(major: number, n: number): void {
  if (pos + 9 > buf.length) grow(9);
  const m = major << 5;
  if (n < 24) {
    buf[pos++] = m | n;
  } else if (n < 0x100) {
    buf[pos++] = m | 24;
    buf[pos++] = n;
  } else if (n < 0x10000) {
    buf[pos++] = m | 25;
    buf[pos++] = n >> 8;
    buf[pos++] = n;
  } else if (n < TWO_POW_32) {
    buf[pos++] = m | 26;
    view.setUint32(pos, n);
    pos += 4;
  } else {
    buf[pos++] = m | 27;
    view.setUint32(pos, Math.floor(n / TWO_POW_32));
    view.setUint32(pos + 4, n >>> 0);
    pos += 8;
  }
}

function headSize(n: number): number {
  return n < 24 ? 1 : n < 0x100 ? 2 : n < 0x10000 ? 3 : n < TWO_POW_32 ? 5 : 9;
}

function encodeAny(v: unknown, depth: number): void {
  switch (typeof v) {
    case "string":
      writeString(v);
      return;
    case "number":
      writeNumber(v);
      return;
    case "boolean":
      if (pos + 1 > buf.length) grow(1);
      buf[pos++] = v ? 0xf5 : 0xf4;
      return;
    case "undefined":
      if (pos + 1 > buf.length) grow(1);
      buf[pos++] = 0xf7;
      return;
    case "object":
      if (v === null) {
        if (pos + 1 > buf.length) grow(1);
        buf[pos++] = 0xf6;
      } else {
        encodeObject(v, depth);
      }
      return;
    case "bigint":
      writeBigInt(v);
      return;
    case "function":
      throw new Refusal("a function", "function");
    default:
      throw new Refusal("a symbol", "symbol");
  }
}

function writeNumber(n: number): void {
  if ((n | 0) === n && (n !== 0 || 1 / n > 0)) {
    if (n >= 0) writeHead(0, n);
    else writeHead(1, -1 - n);
  } else if (Number.isSafeInteger(n) && n !== 0) {
    if (n > 0) writeHead(0, n);
    else writeHead(1, -1 - n);
  } else {
    if (pos + 9 > buf.length) grow(9);
    buf[pos++] = 0xfb;
    view.setFloat64(pos, n);
    pos += 8;
  }
}

function writeString(s: string): void {
  const length = s.length;
  if (length < 64) {
    if (pos + length + 2 > buf.length) grow(length + 2);
    const start = pos;
    if (length < 24) {
      buf[pos++] = 0x60 | length;
    } else {
      buf[pos++] = 0x78;
      buf[pos++] = length;
    }
    for (let i = 0; i < length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) {
        pos = start;
        writeStringUtf8(s);
        return;
      }
      buf[pos++] = c;
    }
    return;
  }
  writeStringUtf8(s);
}

function writeStringUtf8(s: string): void {
  const max = s.length * 3;
  if (pos + max + 9 > buf.length) grow(max + 9);
  const reserved = headSize(max);
  const { written } = textEncoder.encodeInto(
    s,
    buf.subarray(pos + reserved, pos + reserved + max),
  );
  const actual = headSize(written);
  if (actual !== reserved) {
    buf.copyWithin(pos + actual, pos + reserved, pos + reserved + written);
  }
  writeHead(3, written);
  pos += written;
}

function writeBigInt(value: bigint): void {
  let n = value;
  let tag = 0xc2;
  if (n < 0n) {
    tag = 0xc3;
    n = -1n - n;
  }
  if (n <= 0xffffffffffffffffn) {
    if (pos + 10 > buf.length) grow(10);
    view.setBigUint64(pos + 2, n);
    let skip = 0;
    while (skip < 8 && buf[pos + 2 + skip] === 0) skip++;
    buf[pos] = tag;
    buf[pos + 1] = 0x40 | (8 - skip);
    if (skip > 0) {
      for (let i = 2; i < 10 - skip; i++) buf[pos + i] = buf[pos + i + skip]!;
    }
    pos += 10 - skip;
    return;
  }
  let hex = n.toString(16);
  if (hex.length % 2 === 1) hex = `0${hex}`;
  const length = hex.length / 2;
  if (pos + 1 > buf.length) grow(1);
  buf[pos++] = tag;
  writeHead(2, length);
  if (pos + length > buf.length) grow(length);
  for (let i = 0; i < length; i++) {
    buf[pos++] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  }
}

function encodeObject(v: object, depth: number): void {
  if (depth > MAX_DEPTH) {
    throw new Refusal(
      `a value nested deeper than ${MAX_DEPTH} levels`,
      DEPTH_LABEL,
    );
  }
  if (Array.isArray(v)) {
    encodeArray(v, depth);
    return;
  }
  const proto: unknown = Object.getPrototypeOf(v);
  if (proto === Object.prototype || proto === null) {
    encodePlainObject(v as Record<string, unknown>, depth);
  } else if (ArrayBuffer.isView(v)) {
    encodeBinaryView(v);
  } else if (v instanceof Date) {
    if (pos + 10 > buf.length) grow(10);
    buf[pos++] = 0xc0 | TAG_DATE;
    buf[pos++] = 0xfb;
    view.setFloat64(pos, v.getTime() / 1000);
    pos += 8;
  } else if (v instanceof Map) {
    encodeMap(v, depth);
  } else if (v instanceof Set) {
    encodeSet(v, depth);
  } else if (v instanceof Error) {
    encodeError(v, depth);
  } else if (v instanceof RegExp) {
    writeHead(6, TAG_REGEXP);
    const flags = v.flags;
    if (flags === "") {
      writeString(v.source);
    } else {
      writeHead(4, 2);
      writeString(v.source);
      writeString(flags);
    }
  } else if (v instanceof ArrayBuffer) {
    writeHead(6, TAG_ARRAY_BUFFER);
    writeBytes(bytesOf(v, 0, v.byteLength));
  } else if (URL_CLASS !== undefined && v instanceof URL_CLASS) {
    writeHead(6, TAG_URL);
    writeString(v.href);
  } else {
    const custom = CUSTOM_TYPES.length > 0 ? findCustomType(v) : undefined;
    if (!custom) throw refuseObject(v, proto);
    writeHead(6, TAG_CUSTOM);
    writeHead(4, 2);
    writeString(custom.name);
    try {
      encodeAny(custom.encode(v), depth + 1);
    } catch (error: unknown) {
      throw prependPath(error, `<${custom.name}>`);
    }
  }
}

/**
 * A class whose instances may cross to and from workers, the equivalent of
 * superjson's `registerCustom`: register it with the same `name` in the
 * parent and in the worker (at the top of the worker module).
 *
 * @typeParam T The class's instances.
 * @typeParam D The plain data an instance becomes on the wire.
 */
export interface CustomType<T, D> {
  /** A name unique in the process, the same on both sides. */
  name: string;
  /** Whether a value is an instance (usually `value instanceof Class`). */
  is(value: unknown): boolean;
  /** The instance as data that can cross (plain objects, arrays, built-ins). */
  encode(value: T): D;
  /** The instance rebuilt from that data. */
  decode(data: D): T;
}

const CUSTOM_TYPES: CustomType<unknown, unknown>[] = [];
const CUSTOM_BY_NAME = new Map<string, CustomType<unknown, unknown>>();

function findCustomType(v: object): CustomType<unknown, unknown> | undefined {
  for (const type of CUSTOM_TYPES) if (type.is(v)) return type;
  return undefined;
}

/**
 * Lets instances of a class cross between parent and workers. Instances of
 * classes other than the built-ins are refused unless registered, since they
 * would arrive as plain objects without their prototype. Register the type
 * with the same name on both sides; a worker that receives a type it has not
 * registered breaks the protocol (the call fails with `WorkerCrashedError`).
 *
 * @typeParam T The class's instances.
 * @typeParam D The plain data an instance becomes on the wire.
 * @param type Its name and how to tell, encode and decode it.
 * @throws {TypeError} when a field is missing or the name is already registered.
 *
 * @example A class that crosses as its fields
 * ```ts
 * import { registerType } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * class Money {
 *   constructor(readonly cents: bigint, readonly currency: string) {}
 * }
 * registerType<Money, [bigint, string]>({
 *   name: "Money",
 *   is: (value): value is Money => value instanceof Money,
 *   encode: (money) => [money.cents, money.currency],
 *   decode: ([cents, currency]) => new Money(cents, currency),
 * });
 * assert.throws(() =>
 *   registerType({ name: "Money", is: () => false, encode: String, decode: String })
 * );
 * ```
 */
export function registerType<T, D>(type: CustomType<T, D>): void {
  if (typeof type !== "object" || type === null) {
    throw new TypeError(
      `Cannot register type: expected { name, is, encode, decode }, received ${typeof type}`,
    );
  }
  if (typeof type.name !== "string" || type.name === "") {
    throw new TypeError(
      `Cannot register type: "name" must be a non-empty string, received ${
        String(type.name)
      }`,
    );
  }
  for (const key of ["is", "encode", "decode"] as const) {
    if (typeof type[key] !== "function") {
      throw new TypeError(
        `Cannot register type "${type.name}": "${key}" must be a function`,
      );
    }
  }
  if (CUSTOM_BY_NAME.has(type.name)) {
    throw new TypeError(
      `Cannot register type "${type.name}": a type of that name is already registered`,
    );
  }
  const erased = type as unknown as CustomType<unknown, unknown>;
  CUSTOM_TYPES.push(erased);
  CUSTOM_BY_NAME.set(type.name, erased);
}

function encodeArray(v: unknown[], depth: number): void {
  const n = v.length;
  writeHead(4, n);
  const inner = depth + 1;
  let i = 0;
  try {
    for (; i < n; i++) encodeAny(v[i], inner);
  } catch (error: unknown) {
    throw prependPath(error, `[${i}]`);
  }
}

function encodePlainObject(v: Record<string, unknown>, depth: number): void {
  const keys = Object.keys(v);
  const n = keys.length;
  writeHead(5, n);
  const inner = depth + 1;
  let i = 0;
  try {
    for (; i < n; i++) {
      const key = keys[i]!;
      writeString(key);
      encodeAny(v[key], inner);
    }
  } catch (error: unknown) {
    throw prependPath(error, keySegment(keys[i]!));
  }
}

function encodeMap(v: Map<unknown, unknown>, depth: number): void {
  const size = v.size;
  writeHead(6, TAG_MAP);
  writeHead(5, size);
  const inner = depth + 1;
  let count = 0;
  let key: unknown;
  let atValue = false;
  try {
    for (const entry of v) {
      if (count === size) break;
      key = entry[0];
      atValue = false;
      encodeAny(key, inner);
      atValue = true;
      encodeAny(entry[1], inner);
      count++;
    }
  } catch (error: unknown) {
    throw prependPath(
      error,
      atValue ? `.get(${preview(key)})` : `.keys()[${count}]`,
    );
  }
  if (count !== size) {
    throw new Refusal("a Map that changed while being sent", "changed Map");
  }
}

function encodeSet(v: Set<unknown>, depth: number): void {
  const size = v.size;
  writeHead(6, TAG_SET);
  writeHead(4, size);
  const inner = depth + 1;
  let count = 0;
  try {
    for (const item of v) {
      if (count === size) break;
      encodeAny(item, inner);
      count++;
    }
  } catch (error: unknown) {
    throw prependPath(error, `.values()[${count}]`);
  }
  if (count !== size) {
    throw new Refusal("a Set that changed while being sent", "changed Set");
  }
}

function encodeBinaryView(v: ArrayBufferView): void {
  const bytes = bytesOf(v.buffer, v.byteOffset, v.byteLength);
  if (v instanceof Uint8Array) {
    writeBytes(bytes);
    return;
  }
  if (v instanceof DataView) {
    writeHead(6, TAG_DATA_VIEW);
    writeBytes(bytes);
    return;
  }
  const name = (v as { [Symbol.toStringTag]?: unknown })[Symbol.toStringTag];
  const tag = typeof name === "string"
    ? TAG_BY_TYPED_ARRAY_NAME.get(name)
    : undefined;
  if (tag === undefined) {
    throw new Refusal("an unsupported binary view", "binary view");
  }
  writeHead(6, tag);
  const size = (v as unknown as { BYTES_PER_ELEMENT: number })
    .BYTES_PER_ELEMENT;
  writeBytes(LITTLE_ENDIAN || size === 1 ? bytes : swapBytes(bytes, size));
}

/** A byte view on binary data; refuses a detached buffer. */
function bytesOf(
  buffer: ArrayBufferLike,
  byteOffset: number,
  byteLength: number,
): Uint8Array {
  try {
    return new Uint8Array(buffer, byteOffset, byteLength);
  } catch {
    throw new Refusal("a detached ArrayBuffer", "detached ArrayBuffer");
  }
}

/** Writes a byte string, or an attachment reference for a large one. */
function writeBytes(bytes: Uint8Array): void {
  const n = bytes.byteLength;
  if (n >= threshold) {
    writeHead(6, TAG_ATTACHMENT);
    writeHead(4, 2);
    writeHead(0, attachmentBytes);
    writeHead(0, n);
    attachments.push(bytes);
    attachmentBytes += n;
    return;
  }
  writeHead(2, n);
  if (pos + n > buf.length) grow(n);
  if (n < 16) {
    for (let i = 0; i < n; i++) buf[pos + i] = bytes[i]!;
  } else {
    buf.set(bytes, pos);
  }
  pos += n;
}

/** Copies bytes, reversing each element (for big-endian hosts). */
function swapBytes(bytes: Uint8Array, size: number): Uint8Array {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i += size) {
    for (let j = 0; j < size; j++) out[i + j] = bytes[i + size - 1 - j]!;
  }
  return out;
}

function encodeError(error: Error, depth: number): void {
  if (errorStack.includes(error)) {
    throw new Refusal("a circular reference", "circular reference");
  }
  const name = readErrorText(error, "name", "Error");
  const message = readErrorText(error, "message", "");
  let stack: string | undefined;
  try {
    const value: unknown = error.stack;
    if (typeof value === "string") stack = value;
  } catch {
    stack = undefined;
  }
  let hasCause = false;
  let cause: unknown;
  let keys: string[] = [];
  try {
    if ("cause" in error) {
      cause = error.cause;
      hasCause = errorStack.length < MAX_ERROR_CHAIN - 1 &&
        cause !== error && !errorStack.includes(cause as object);
    }
    keys = Object.keys(error).filter((key) =>
      key !== "name" && key !== "message" && key !== "stack" && key !== "cause"
    );
    if (
      error instanceof AggregateError && Object.hasOwn(error, "errors") &&
      !keys.includes("errors")
    ) {
      keys.push("errors");
    }
  } catch {
    // A throwing proxy or getter: send what could be read.
  }
  writeHead(6, TAG_ERROR);
  writeHead(
    5,
    2 + (stack === undefined ? 0 : 1) + (hasCause ? 1 : 0) + keys.length,
  );
  writeString("name");
  writeString(name);
  writeString("message");
  writeString(message);
  if (stack !== undefined) {
    writeString("stack");
    writeString(stack);
  }
  errorStack.push(error);
  try {
    const inner = depth + 1;
    if (hasCause) {
      writeString("cause");
      encodeErrorField(error, "cause", inner);
    }
    for (const key of keys) {
      writeString(key);
      encodeErrorField(error, key, inner);
    }
  } finally {
    errorStack.pop();
  }
}

function readErrorText(error: Error, key: string, fallback: string): string {
  try {
    const value: unknown = (error as unknown as Record<string, unknown>)[key];
    if (typeof value === "string") return value;
    return value === undefined ? fallback : String(value);
  } catch {
    return fallback;
  }
}

/** Encodes one field of an error, or a placeholder string if it cannot cross. */
function encodeErrorField(error: Error, key: string, depth: number): void {
  const savedPos = pos;
  const savedAttachments = attachments.length;
  const savedAttachmentBytes = attachmentBytes;
  const savedErrors = errorStack.length;
  let value: unknown;
  try {
    value = (error as unknown as Record<string, unknown>)[key];
    encodeAny(value, depth);
  } catch (failure: unknown) {
    pos = savedPos;
    attachments.length = savedAttachments;
    attachmentBytes = savedAttachmentBytes;
    errorStack.length = savedErrors;
    let label = "value";
    if (failure instanceof Refusal) {
      label = failure.label === DEPTH_LABEL && findCycle(value) !== undefined
        ? "circular reference"
        : failure.label;
    }
    writeString(`[unserializable ${label}]`);
  }
}

function refuseObject(v: object, proto: unknown): Refusal {
  if (v instanceof Promise) return new Refusal("a promise", "promise");
  for (
    const [ctor, name] of [
      [WeakMap, "WeakMap"],
      [WeakSet, "WeakSet"],
      [globalThis.WeakRef, "WeakRef"],
    ] as const
  ) {
    if (typeof ctor === "function" && v instanceof ctor) {
      return new Refusal(`a ${name}`, name);
    }
  }
  for (
    const [ctor, name] of [
      [Number, "Number"],
      [String, "String"],
      [Boolean, "Boolean"],
      [BigInt, "BigInt"],
      [Symbol, "Symbol"],
    ] as const
  ) {
    if (v instanceof ctor) {
      return new Refusal(`a boxed ${name}`, `boxed ${name}`);
    }
  }
  let name: unknown;
  try {
    const ctor = (proto as { constructor?: unknown }).constructor;
    if (typeof ctor === "function" && ctor.prototype === proto) {
      name = ctor.name;
    }
  } catch {
    name = undefined;
  }
  if (typeof name === "string" && name !== "") {
    return new Refusal(`an instance of ${name}`, `instance of ${name}`);
  }
  return new Refusal(
    "an object with a custom prototype",
    "object with a custom prototype",
  );
}

function prependPath(error: unknown, segment: string): unknown {
  if (error instanceof Refusal) error.path = segment + error.path;
  return error;
}

function keySegment(key: string): string {
  if (key.length > 40) return `[${JSON.stringify(`${key.slice(0, 40)}…`)}]`;
  return IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

function preview(key: unknown): string {
  switch (typeof key) {
    case "string":
      return JSON.stringify(key.length > 40 ? `${key.slice(0, 40)}…` : key);
    case "number":
      return Object.is(key, -0) ? "-0" : String(key);
    case "bigint":
      return `${key}n`;
    case "object":
      return key === null ? "null" : Array.isArray(key) ? "[…]" : "{…}";
    case "function":
      return "function";
    default:
      return String(key);
  }
}

function formatPath(path: string): string {
  if (path === "") return "value";
  const bare = path.startsWith(".") ? path.slice(1) : path;
  return bare.length > MAX_PATH_CHARS
    ? `${bare.slice(0, MAX_PATH_CHARS)}…`
    : bare;
}

function refusalToTypeError(refusal: Refusal, root: unknown): TypeError {
  if (refusal.label === DEPTH_LABEL) {
    const cycle = findCycle(root);
    if (cycle !== undefined) {
      const target = cycle.target === ""
        ? "the value itself"
        : formatPath(cycle.target);
      return new TypeError(
        `Cannot send ${
          formatPath(cycle.path)
        }: a circular reference cannot cross to a worker process (it refers back to ${target})`,
      );
    }
  }
  const hint = refusal.label.startsWith("instance of ")
    ? "; send a plain object instead"
    : "";
  return new TypeError(
    `Cannot send ${
      formatPath(refusal.path)
    }: ${refusal.what} cannot cross to a worker process${hint}`,
  );
}

/**
 * Finds a circular reference below `root` the way the encoder walks it (cold
 * path: only after the encoder gave up on depth). Returns the path of the
 * reference and of the object it points back to.
 */
function findCycle(
  root: unknown,
): { path: string; target: string } | undefined {
  const ancestors = new Map<object, string>();
  const done = new Set<object>();

  function visit(
    v: unknown,
    path: string,
    depth: number,
  ): { path: string; target: string } | undefined {
    if (typeof v !== "object" || v === null || v instanceof Error) {
      return undefined;
    }
    const target = ancestors.get(v);
    if (target !== undefined) return { path, target };
    if (done.has(v) || depth > MAX_DEPTH + 1) return undefined;
    ancestors.set(v, path);
    try {
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const found = visit(v[i], `${path}[${i}]`, depth + 1);
          if (found) return found;
        }
      } else if (v instanceof Map) {
        let i = 0;
        for (const [key, value] of v) {
          const found = visit(key, `${path}.keys()[${i++}]`, depth + 1) ??
            visit(value, `${path}.get(${preview(key)})`, depth + 1);
          if (found) return found;
        }
      } else if (v instanceof Set) {
        let i = 0;
        for (const item of v) {
          const found = visit(item, `${path}.values()[${i++}]`, depth + 1);
          if (found) return found;
        }
      } else {
        const proto: unknown = Object.getPrototypeOf(v);
        if (proto === Object.prototype || proto === null) {
          for (const key of Object.keys(v)) {
            const found = visit(
              (v as Record<string, unknown>)[key],
              path + keySegment(key),
              depth + 1,
            );
            if (found) return found;
          }
        }
      }
    } catch {
      // A throwing getter: this branch has nothing more to tell.
    } finally {
      ancestors.delete(v);
    }
    done.add(v);
    return undefined;
  }

  return visit(root, "", 1);
}

// ---------------------------------------------------------------------------
// Decoder
// ---------------------------------------------------------------------------

let data: Uint8Array = EMPTY_BYTES;
let dataView: DataView = EMPTY_VIEW;
let at = 0;
let end = 0;
let area: Uint8Array = EMPTY_BYTES;

const TEXT_CACHE_BITS = 10;
const TEXT_CACHE_SHIFT = 32 - TEXT_CACHE_BITS;
const textCache: (string | undefined)[] = new Array<string | undefined>(
  1 << TEXT_CACHE_BITS,
).fill(undefined);
const textCacheA = new Int32Array(1 << TEXT_CACHE_BITS);
const textCacheB = new Int32Array(1 << TEXT_CACHE_BITS);

/**
 * Decodes a CBOR head written by {@linkcode encodeValue} (or by another
 * writer that follows `docs/PROTOCOL.md`).
 *
 * Binary values are views into `head` or `attachmentArea` when their
 * alignment allows (no copy), copies otherwise; an `ArrayBuffer` is always a
 * copy. Integers beyond the safe range decode as `bigint`.
 *
 * @param head The CBOR bytes: exactly one data item.
 * @param attachmentArea The bytes after the head in the frame payload.
 * @returns The decoded value.
 * @throws {ProtocolError} when the bytes are not one well-formed value of the
 * protocol: truncated, trailing bytes, indefinite lengths, reserved or
 * unknown codes, unknown tags, invalid UTF-8, nesting deeper than 512, an
 * attachment range outside the area, and so on.
 */
export function decodeValue(
  head: Uint8Array,
  attachmentArea?: Uint8Array,
): unknown {
  // Byte strings decode as plain Uint8Array views, even from a Node Buffer.
  data = head.constructor === Uint8Array
    ? head
    : new Uint8Array(head.buffer, head.byteOffset, head.byteLength);
  dataView = new DataView(data.buffer, data.byteOffset, data.byteLength);
  at = 0;
  end = data.length;
  area = attachmentArea === undefined
    ? EMPTY_BYTES
    : attachmentArea.constructor === Uint8Array
    ? attachmentArea
    : new Uint8Array(
      attachmentArea.buffer,
      attachmentArea.byteOffset,
      attachmentArea.byteLength,
    );
  try {
    const value = decodeItem(1);
    if (at !== end) {
      throw malformed(`${end - at} bytes follow the value`);
    }
    return value;
  } catch (error: unknown) {
    if (error instanceof ProtocolError) throw error;
    throw new ProtocolError(
      `Cannot decode value: unexpected failure at byte ${at}`,
      { cause: error },
    );
  } finally {
    data = EMPTY_BYTES;
    dataView = EMPTY_VIEW;
    area = EMPTY_BYTES;
  }
}

function malformed(detail: string): ProtocolError {
  return new ProtocolError(`Cannot decode value: ${detail} (at byte ${at})`);
}

function truncated(): ProtocolError {
  return malformed("the input ends in the middle of a value");
}

function tooDeep(): ProtocolError {
  return malformed(`nesting deeper than ${MAX_DEPTH} levels`);
}

/** Reads the argument of an initial byte whose additional info is >= 24. */
function readArgument(info: number): number {
  switch (info) {
    case 24:
      if (at + 1 > end) throw truncated();
      return data[at++]!;
    case 25: {
      if (at + 2 > end) throw truncated();
      const n = (data[at]! << 8) | data[at + 1]!;
      at += 2;
      return n;
    }
    case 26: {
      if (at + 4 > end) throw truncated();
      const n = dataView.getUint32(at);
      at += 4;
      return n;
    }
    case 27: {
      if (at + 8 > end) throw truncated();
      const n = dataView.getUint32(at) * TWO_POW_32 +
        dataView.getUint32(at + 4);
      at += 8;
      return n;
    }
    case 31:
      throw malformed("indefinite lengths and break codes are not allowed");
    default:
      throw malformed(`reserved additional information ${info}`);
  }
}

/** Reads a length and checks that at least `length * unit` bytes remain. */
function readLength(info: number, unit: number): number {
  const n = info < 24 ? info : readArgument(info);
  if (n * unit > end - at) {
    throw malformed(
      `a length of ${n} exceeds the ${end - at} bytes that are left`,
    );
  }
  return n;
}

function decodeItem(depth: number): unknown {
  if (at >= end) throw truncated();
  const initial = data[at++]!;
  const info = initial & 31;
  switch (initial >> 5) {
    case 0:
      if (info < 24) return info;
      return info === 27 ? readUint64(false) : readArgument(info);
    case 1:
      if (info < 24) return -1 - info;
      return info === 27 ? readUint64(true) : -1 - readArgument(info);
    case 2: {
      const n = readLength(info, 1);
      const bytes = data.subarray(at, at + n);
      at += n;
      return bytes;
    }
    case 3:
      return readText(readLength(info, 1));
    case 4: {
      const n = readLength(info, 1);
      if (depth > MAX_DEPTH) throw tooDeep();
      const array = new Array<unknown>(n);
      for (let i = 0; i < n; i++) array[i] = decodeItem(depth + 1);
      return array;
    }
    case 5: {
      const n = readLength(info, 2);
      if (depth > MAX_DEPTH) throw tooDeep();
      return readObjectEntries(n, depth);
    }
    case 6:
      return decodeTag(info < 24 ? info : readArgument(info), depth);
    default:
      return decodeSimple(info);
  }
}

function readUint64(negative: boolean): number | bigint {
  if (at + 8 > end) throw truncated();
  const hi = dataView.getUint32(at);
  const lo = dataView.getUint32(at + 4);
  at += 8;
  if (hi < SAFE_HI_LIMIT) {
    const n = hi * TWO_POW_32 + lo;
    if (!negative) return n;
    if (n < Number.MAX_SAFE_INTEGER) return -1 - n;
  }
  const big = (BigInt(hi) << 32n) | BigInt(lo);
  return negative ? -1n - big : big;
}

function decodeSimple(info: number): unknown {
  switch (info) {
    case 20:
      return false;
    case 21:
      return true;
    case 22:
      return null;
    case 23:
      return undefined;
    case 25: {
      if (at + 2 > end) throw truncated();
      const half = (data[at]! << 8) | data[at + 1]!;
      at += 2;
      return decodeHalf(half);
    }
    case 26: {
      if (at + 4 > end) throw truncated();
      const n = dataView.getFloat32(at);
      at += 4;
      return n;
    }
    case 27: {
      if (at + 8 > end) throw truncated();
      const n = dataView.getFloat64(at);
      at += 8;
      return n;
    }
    case 31:
      throw malformed("indefinite lengths and break codes are not allowed");
    default:
      if (info >= 28) {
        throw malformed(`reserved additional information ${info}`);
      }
      throw malformed(`unknown simple value ${info}`);
  }
}

function decodeHalf(half: number): number {
  const exponent = (half >> 10) & 0x1f;
  const mantissa = half & 0x3ff;
  const sign = half & 0x8000 ? -1 : 1;
  if (exponent === 0) return sign * mantissa * 2 ** -24;
  if (exponent === 31) return mantissa === 0 ? sign * Infinity : NaN;
  return sign * (1024 + mantissa) * 2 ** (exponent - 25);
}

/** Decodes `n` UTF-8 bytes at `at` (the length is already checked). */
function readText(n: number): string {
  if (n <= 8) return readShortText(n);
  if (n < 24) {
    const start = at;
    let s = "";
    for (let i = 0; i < n; i++) {
      const c = data[start + i]!;
      if (c >= 0x80) return readTextUtf8(n);
      s += String.fromCharCode(c);
    }
    at += n;
    return s;
  }
  return readTextUtf8(n);
}

/**
 * Decodes a text of at most 8 bytes through a small cache of short ASCII
 * strings (keys repeat, and a cached string needs neither allocation nor
 * interning again). Seven bits a byte fit the bytes in two 32-bit words.
 */
function readShortText(n: number): string {
  const start = at;
  let a = 0;
  let b = n;
  for (let i = 0; i < n; i++) {
    const c = data[start + i]!;
    if (c >= 0x80) return readTextUtf8(n);
    if (i < 4) a = (a << 7) | c;
    else b = (b << 7) | c;
  }
  at += n;
  const slot = (Math.imul(a, 0x9e3779b1) ^ b) >>> TEXT_CACHE_SHIFT;
  const cached = textCache[slot];
  if (
    cached !== undefined && textCacheA[slot] === a && textCacheB[slot] === b
  ) {
    return cached;
  }
  let s = "";
  for (let i = 0; i < n; i++) s += String.fromCharCode(data[start + i]!);
  textCache[slot] = s;
  textCacheA[slot] = a;
  textCacheB[slot] = b;
  return s;
}

function readTextUtf8(n: number): string {
  let s: string;
  try {
    s = textDecoder.decode(data.subarray(at, at + n));
  } catch {
    throw malformed("a text string that is not valid UTF-8");
  }
  at += n;
  return s;
}

/** Reads a text string item (for keys and tag contents). */
function readTextItem(what: string): string {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  if (initial >> 5 !== 3) throw malformed(`${what} is not a text string`);
  at++;
  return readText(readLength(initial & 31, 1));
}

function readObjectEntries(n: number, depth: number): Record<string, unknown> {
  const object: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) {
    const key = readTextItem("a map key of a plain object");
    const value = decodeItem(depth + 1);
    if (key === "__proto__") {
      Object.defineProperty(object, key, {
        value,
        writable: true,
        enumerable: true,
        configurable: true,
      });
    } else {
      object[key] = value;
    }
  }
  return object;
}

/** Reads the header of an array or map that a tag wraps; returns its count. */
function readContainerHeader(
  major: number,
  unit: number,
  what: string,
): number {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  if (initial >> 5 !== major) throw malformed(what);
  at++;
  return readLength(initial & 31, unit);
}

function decodeTag(tag: number, depth: number): unknown {
  switch (tag) {
    case TAG_DATE: {
      return secondsToDate(readNumberItem());
    }
    case TAG_BIGNUM:
      return readBignum();
    case TAG_NEGATIVE_BIGNUM:
      return -1n - readBignum();
    case TAG_URL: {
      const href = readTextItem("the content of a URL (tag 32)");
      try {
        return new (URL_CLASS as typeof URL)(href);
      } catch {
        throw malformed("a URL (tag 32) that does not parse");
      }
    }
    case TAG_REGEXP:
      return readRegExp();
    case TAG_SET: {
      const n = readContainerHeader(
        4,
        1,
        "a Set (tag 258) that does not wrap an array",
      );
      if (depth > MAX_DEPTH) throw tooDeep();
      const set = new Set<unknown>();
      for (let i = 0; i < n; i++) set.add(decodeItem(depth + 1));
      return set;
    }
    case TAG_MAP: {
      const n = readContainerHeader(
        5,
        2,
        "a Map (tag 259) that does not wrap a map",
      );
      if (depth > MAX_DEPTH) throw tooDeep();
      const map = new Map<unknown, unknown>();
      for (let i = 0; i < n; i++) {
        const key = decodeItem(depth + 1);
        map.set(key, decodeItem(depth + 1));
      }
      return map;
    }
    case TAG_ATTACHMENT:
      return readAttachment();
    case TAG_ERROR: {
      const n = readContainerHeader(
        5,
        2,
        "an error (tag 27001) that does not wrap a map",
      );
      if (depth > MAX_DEPTH) throw tooDeep();
      return buildError(readObjectEntries(n, depth));
    }
    case TAG_ARRAY_BUFFER: {
      const bytes = readBinary();
      return bytes.buffer.slice(
        bytes.byteOffset,
        bytes.byteOffset + bytes.byteLength,
      );
    }
    case TAG_DATA_VIEW: {
      const bytes = readBinary();
      return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    case TAG_CUSTOM: {
      const n = readContainerHeader(
        4,
        1,
        "a custom type (tag 27010) that does not wrap [name, data]",
      );
      if (n !== 2) {
        throw malformed("a custom type (tag 27010) that is not [name, data]");
      }
      if (depth > MAX_DEPTH) throw tooDeep();
      const name = readTextItem("a custom type name");
      const data = decodeItem(depth + 1);
      const type = CUSTOM_BY_NAME.get(name);
      if (!type) {
        throw malformed(
          `a value of custom type "${name}", which is not registered in this process (call registerType on both sides)`,
        );
      }
      return type.decode(data);
    }
    default: {
      const ctor = TYPED_ARRAY_BY_TAG.get(tag);
      if (ctor !== undefined) return readTypedArray(ctor);
      if (TYPED_ARRAY_BY_TAG.has(tag)) {
        throw malformed(
          `a Float16Array (tag ${tag}), which this runtime lacks`,
        );
      }
      throw malformed(`unknown tag ${tag}`);
    }
  }
}

/** Reads an integer or a float (the content of a date). */
function readNumberItem(): number {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  const major = initial >> 5;
  const info = initial & 31;
  if (major <= 1 || (major === 7 && info >= 25 && info <= 27)) {
    const value = decodeItem(1);
    if (typeof value === "number") return value;
  }
  throw malformed("a date (tag 1) that does not wrap a number");
}

function secondsToDate(seconds: number): Date {
  if (!Number.isFinite(seconds)) return new Date(NaN);
  // ms / 1000 is one-to-one over the range of dates: find the ms it came from.
  let ms = Math.round(seconds * 1000);
  if (ms / 1000 !== seconds) {
    if ((ms - 1) / 1000 === seconds) ms -= 1;
    else if ((ms + 1) / 1000 === seconds) ms += 1;
  }
  return new Date(ms);
}

const HEX: readonly string[] = Array.from(
  { length: 256 },
  (_, i) => i.toString(16).padStart(2, "0"),
);

function readBignum(): bigint {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  if (initial >> 5 !== 2) {
    throw malformed("a bignum (tag 2 or 3) that does not wrap a byte string");
  }
  at++;
  const n = readLength(initial & 31, 1);
  const start = at;
  at += n;
  if (n <= 6) {
    let value = 0;
    for (let i = 0; i < n; i++) value = value * 256 + data[start + i]!;
    return BigInt(value);
  }
  if (n === 8) return dataView.getBigUint64(start);
  let hex = "0x";
  for (let i = 0; i < n; i++) hex += HEX[data[start + i]!];
  return BigInt(hex);
}

function readRegExp(): RegExp {
  if (at >= end) throw truncated();
  let source: string;
  let flags = "";
  if (data[at]! >> 5 === 4) {
    const n = readContainerHeader(4, 1, "");
    if (n !== 2) {
      throw malformed("a RegExp (tag 35) array that is not [source, flags]");
    }
    source = readTextItem("the source of a RegExp (tag 35)");
    flags = readTextItem("the flags of a RegExp (tag 35)");
  } else {
    source = readTextItem("the content of a RegExp (tag 35)");
  }
  try {
    return new RegExp(source, flags);
  } catch {
    throw malformed("a RegExp (tag 35) that does not compile");
  }
}

/** Reads a byte string or an attachment reference. */
function readBinary(): Uint8Array {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  const major = initial >> 5;
  if (major === 2) {
    at++;
    const n = readLength(initial & 31, 1);
    const bytes = data.subarray(at, at + n);
    at += n;
    return bytes;
  }
  if (major === 6) {
    at++;
    const info = initial & 31;
    const tag = info < 24 ? info : readArgument(info);
    if (tag === TAG_ATTACHMENT) return readAttachment();
  }
  throw malformed("a binary tag that wraps neither bytes nor an attachment");
}

function readAttachment(): Uint8Array {
  const n = readContainerHeader(
    4,
    1,
    "an attachment (tag 27000) that does not wrap [offset, length]",
  );
  if (n !== 2) {
    throw malformed("an attachment (tag 27000) that is not [offset, length]");
  }
  const offset = readAttachmentNumber();
  const length = readAttachmentNumber();
  if (offset + length > area.length) {
    throw malformed(
      `an attachment [${offset}, ${length}] outside the ${area.length}-byte attachment area`,
    );
  }
  return area.subarray(offset, offset + length);
}

function readAttachmentNumber(): number {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  if (initial >> 5 !== 0) {
    throw malformed(
      "an attachment offset or length that is not an unsigned integer",
    );
  }
  at++;
  const info = initial & 31;
  return info < 24 ? info : readArgument(info);
}

function readTypedArray(ctor: TypedArrayConstructor): ArrayBufferView {
  const bytes = readBinary();
  const size = ctor.BYTES_PER_ELEMENT;
  const length = bytes.byteLength / size;
  if (!Number.isInteger(length)) {
    throw malformed(
      `${bytes.byteLength} bytes for a ${ctor.name}, not a multiple of ${size}`,
    );
  }
  if (!LITTLE_ENDIAN && size > 1) {
    return new ctor(swapBytes(bytes, size).buffer, 0, length);
  }
  if (bytes.byteOffset % size === 0) {
    return new ctor(bytes.buffer, bytes.byteOffset, length);
  }
  return new ctor(bytes.slice().buffer, 0, length);
}

const ERROR_CLASSES = new Map<string, ErrorConstructor>([
  ["Error", Error],
  ["TypeError", TypeError],
  ["RangeError", RangeError],
  ["SyntaxError", SyntaxError],
  ["ReferenceError", ReferenceError],
  ["EvalError", EvalError],
  ["URIError", URIError],
]);

function buildError(fields: Record<string, unknown>): Error {
  const { name, message } = fields;
  if (typeof name !== "string" || typeof message !== "string") {
    throw malformed("an error (tag 27001) without a text name and message");
  }
  const hasStack = Object.hasOwn(fields, "stack");
  if (hasStack && typeof fields.stack !== "string") {
    throw malformed("an error (tag 27001) whose stack is not text");
  }
  const options = Object.hasOwn(fields, "cause")
    ? { cause: fields.cause }
    : undefined;
  let error: Error;
  let usedErrors = false;
  if (name === "AggregateError") {
    usedErrors = Array.isArray(fields.errors);
    error = new AggregateError(
      usedErrors ? fields.errors as unknown[] : [],
      message,
      options,
    );
  } else {
    error = new (ERROR_CLASSES.get(name) ?? Error)(message, options);
  }
  if (error.name !== name) {
    Object.defineProperty(error, "name", {
      value: name,
      writable: true,
      enumerable: false,
      configurable: true,
    });
  }
  if (hasStack) {
    Object.defineProperty(error, "stack", {
      value: fields.stack,
      writable: true,
      enumerable: false,
      configurable: true,
    });
  } else {
    delete (error as { stack?: string }).stack;
  }
  for (const key of Object.keys(fields)) {
    if (
      key === "name" || key === "message" || key === "stack" ||
      key === "cause" || (usedErrors && key === "errors")
    ) {
      continue;
    }
    // Bun gives errors own `line`, `column`…: redefine them in wire order.
    if (Object.hasOwn(error, key)) {
      delete (error as unknown as Record<string, unknown>)[key];
    }
    Object.defineProperty(error, key, {
      value: fields[key],
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  return error;
}
