/**
 * The encoder of the value codec: a hand-written CBOR (RFC 8949) writer for
 * exactly the value table of `docs/PROTOCOL.md`.
 *
 * It reuses one growable scratch buffer across calls (the shared state at
 * the top of this file) and hands out a fresh copy of the bytes it wrote;
 * binary values of {@linkcode ATTACHMENT_THRESHOLD_BYTES} and more are not
 * copied at all but returned as attachments, to be written after the head
 * as they are.
 *
 * @module
 */

import {
  type CrossingDirection,
  DEPTH_LABEL,
  findCycle,
  keySegment,
  prependPath,
  preview,
  Refusal,
  refusalToTypeError,
  refuseObject,
} from "./_refusal.ts";

import {
  LITTLE_ENDIAN,
  MAX_DEPTH,
  MAX_ERROR_CHAIN,
  swapBytes,
  TAG_ARRAY_BUFFER,
  TAG_ATTACHMENT,
  TAG_BY_TYPED_ARRAY_NAME,
  TAG_CUSTOM,
  TAG_DATA_VIEW,
  TAG_DATE,
  TAG_ERROR,
  TAG_MAP,
  TAG_REGEXP,
  TAG_SET,
  TAG_URL,
  TWO_POW_32,
  URL_CLASS,
} from "./_tags.ts";
import { findCustomType } from "./register_type.ts";

/** Binary values of at least this many bytes travel as attachments. */
export const ATTACHMENT_THRESHOLD_BYTES = 65536;

/** A value encoded for the wire: the CBOR head and the attachment area. */
export interface EncodedValue {
  /**
   * The CBOR bytes of the value, which no later encode overwrites: the caller
   * may keep them. A small head is a view into a shared buffer (its
   * `byteOffset` is not 0), a larger one a copy of its own.
   */
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
  /**
   * Which way the value is going, for the message of a refusal:
   * `"to-worker"` (a call's arguments: "cannot cross to the worker") or
   * `"to-parent"` (a result, an error, streamed values: "cannot cross from
   * the worker to the parent"). Without it the message says "cannot cross
   * to another process".
   *
   * @default {undefined}
   */
  direction?: CrossingDirection | undefined;
}

/** The scratch buffer is dropped after an encode that grew it past this. */
const MAX_KEPT_SCRATCH_BYTES = 4 * 1024 * 1024;
const INITIAL_SCRATCH_BYTES = 16 * 1024;

const textEncoder = new TextEncoder();

let buf = new Uint8Array(INITIAL_SCRATCH_BYTES);
let view = new DataView(buf.buffer);
let pos = 0;
let threshold = ATTACHMENT_THRESHOLD_BYTES;
let attachments: Uint8Array[] = [];
let attachmentBytes = 0;
/** The errors being encoded, outermost first (for cause chains and cycles). */
let errorStack: object[] = [];
/** The attachments of a value without any (shared, so frozen). */
const NO_ATTACHMENTS = Object.freeze([]) as unknown as Uint8Array[];
let busy = false;

/** Heads up to this size are copied into a shared slab, not a buffer of their own. */
const SLAB_HEAD_BYTES = 1024;
const SLAB_BYTES = 8 * 1024;
let slab = new Uint8Array(SLAB_BYTES);
let slabUsed = 0;

/**
 * The head's bytes in a buffer no later encode writes to: a small head is a
 * view into an 8 KiB slab, filled once and then left to its views (a fresh
 * `ArrayBuffer` per message cost the parent and the worker an allocation
 * with a backing store each, freed by the sweeper); a larger one is a copy
 * of its own. A head kept long keeps its slab (at most 8 KiB) alive.
 */
function takeHead(bytes: number): Uint8Array {
  if (bytes > SLAB_HEAD_BYTES) return buf.slice(0, bytes);
  if (slabUsed + bytes > SLAB_BYTES) {
    slab = new Uint8Array(SLAB_BYTES);
    slabUsed = 0;
  }
  const head = slab.subarray(slabUsed, slabUsed + bytes);
  head.set(buf.subarray(0, bytes));
  // 8-byte aligned, so that the next head's DataView reads stay aligned.
  slabUsed += (bytes + 7) & ~7;
  return head;
}

/** Whether Object.prototype has no enumerable property (for…in is exact). */
let prototypeClean = true;

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
 * @param options The attachment threshold, header space and direction.
 * @returns The head (bytes no later encode overwrites) and the attachments (views, no copy).
 * @throws {TypeError} when the value holds something that cannot cross (a
 * function, a symbol, a promise, an instance of another class, a circular
 * reference, nesting deeper than 512); the message names the path and the
 * direction, e.g. `Cannot send args[1].onDone: a function cannot cross to
 * the worker`.
 * @throws {RangeError} when `attachmentThresholdBytes` is not a non-negative
 * number, or `prefixBytes` not a whole number from 0 to 64.
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
  const prefix = options?.prefixBytes ?? 0;
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > 64) {
    throw new RangeError(
      `Cannot encode value: prefixBytes must be a whole number from 0 to 64, received ${
        String(prefix)
      }`,
    );
  }
  // A getter that sends a value while we encode gets a scratch of its own.
  const outer = busy ? saveEncoderState() : undefined;
  if (outer !== undefined) {
    buf = new Uint8Array(INITIAL_SCRATCH_BYTES);
    view = new DataView(buf.buffer);
    attachments = [];
    errorStack = [];
  }
  // Otherwise both are empty and not handed out (see the finally below).
  busy = true;
  buf.fill(0, 0, prefix);
  pos = prefix;
  threshold = limit;
  attachmentBytes = 0;
  prototypeClean = true;
  for (const _ in Object.prototype) {
    prototypeClean = false;
    break;
  }
  try {
    encodeAny(value, 1);
    return {
      head: takeHead(pos),
      attachments: attachments.length === 0 ? NO_ATTACHMENTS : attachments,
      attachmentBytes,
    };
  } catch (error: unknown) {
    if (error instanceof Refusal) {
      throw refusalToTypeError(error, value, options?.direction);
    }
    throw error;
  } finally {
    if (outer !== undefined) {
      restoreEncoderState(outer);
    } else {
      busy = false;
      // A list handed out is the caller's; an empty one is used again.
      if (attachments.length > 0) attachments = [];
      errorStack.length = 0;
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
    const custom = findCustomType(v);
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
  if (prototypeClean) {
    // for…in needs no array of keys (Object.keys made one per object, a
    // fifth of encoding rows on Deno); it is exact for a plain object while
    // Object.prototype has no enumerable property. Up to 23 keys the head is
    // one byte, written once the entries are: a key deleted by a getter
    // meanwhile is skipped, never counted.
    let n = 0;
    for (const _ in v) if (++n === 24) break;
    if (n < 24) {
      if (pos + 1 > buf.length) grow(1);
      const headAt = pos++;
      const inner = depth + 1;
      let count = 0;
      let current = "";
      try {
        for (const key in v) {
          current = key;
          writeString(key);
          encodeAny(v[key], inner);
          count++;
        }
      } catch (error: unknown) {
        throw prependPath(error, keySegment(current));
      }
      buf[headAt] = 0xa0 | count;
      return;
    }
  }
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
