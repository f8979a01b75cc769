/**
 * The decoder of the value codec: a strict CBOR (RFC 8949) reader for
 * exactly the value table of `docs/PROTOCOL.md`. Anything that is not a
 * well-formed head of this protocol throws a {@linkcode ProtocolError}, and
 * no claimed length is trusted before it has been checked against the bytes
 * that are really there.
 *
 * Rows of plain objects with the same keys are built by one object literal
 * compiled for their key sequence (see `_shapes.ts`), after each key's
 * bytes are checked; what decoding may build is charged against a memory
 * budget (see `_decode_budget.ts`).
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";
import {
  LITTLE_ENDIAN,
  MAX_DEPTH,
  SAFE_HI_LIMIT,
  swapBytes,
  TAG_ARRAY_BUFFER,
  TAG_ATTACHMENT,
  TAG_BIGNUM,
  TAG_CUSTOM,
  TAG_DATA_VIEW,
  TAG_DATE,
  TAG_ERROR,
  TAG_MAP,
  TAG_NEGATIVE_BIGNUM,
  TAG_REGEXP,
  TAG_SET,
  TAG_URL,
  TWO_POW_32,
  TYPED_ARRAY_BY_TAG,
  type TypedArrayConstructor,
  URL_CLASS,
} from "./_tags.ts";
import {
  ARRAY_COST,
  BIGNUM_COST,
  BUFFER_COST,
  CUSTOM_COST,
  DATE_COST,
  DECODE_BASE_BYTES,
  DECODE_BYTES_PER_FRAME_BYTE,
  ENTRY_COST,
  ERROR_COST,
  MAP_COST,
  OBJECT_COST,
  PROPERTY_COST,
  REGEXP_COST,
  SET_COST,
  SLOT_COST,
  URL_COST,
  VIEW_COST,
} from "./_decode_budget.ts";
import {
  learnShape,
  MAX_SHAPE_KEYS,
  MAX_SHAPES_PER_DECODE,
  type Shape,
  shapeOf,
} from "./_shapes.ts";
import { customTypeByName } from "./register_type.ts";

import { buildError } from "./wire_error.ts";

const textDecoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const EMPTY_BYTES = new Uint8Array(0);

let data: Uint8Array = EMPTY_BYTES;
/**
 * A view of `data`, made on first use (floats, 64-bit integers): most
 * messages have neither, and a `DataView` per message is measurable.
 */
let dataView: DataView | undefined;
let at = 0;
let end = 0;
let area: Uint8Array = EMPTY_BYTES;
/** Bytes of memory the value may still take (an estimate; see spend()). */
let budget = 0;
/** The budget this decode started with, for the error message. */
let budgetLimit = 0;

/** Longer arrays are not allocated at their full length up front. */
const PREALLOCATE_MAX_ITEMS = 4096;

/**
 * Short ASCII texts (up to 8 bytes) are kept by a hash of their bytes in
 * 4,096 slots, so that the distinct short values of a batch of rows (ids,
 * codes, `"x1"` to `"x999"`) mostly hit: with 1,024 slots, 1,000 distinct
 * texts missed about a third of the time, and decoding the rich benchmark
 * payload took ~8% longer on both runtimes. At most 4,096 strings of up to
 * 8 characters are kept.
 */
const TEXT_CACHE_BITS = 12;
const TEXT_CACHE_SHIFT = 32 - TEXT_CACHE_BITS;
const textCache: (string | undefined)[] = new Array<string | undefined>(
  1 << TEXT_CACHE_BITS,
).fill(undefined);
const textCacheA = new Int32Array(1 << TEXT_CACHE_BITS);
const textCacheB = new Int32Array(1 << TEXT_CACHE_BITS);

/** Options of {@linkcode decodeValue}. */
export interface DecodeValueOptions {
  /**
   * The most memory, in estimated bytes, the decoded value may take to
   * build; a value that would take more is refused with a `ProtocolError`
   * before the allocation that would pass the limit.
   *
   * @default {64 MiB + 8 × (head + attachment area bytes)}
   */
  maxBuildBytes?: number | undefined;
}

/**
 * Decodes a CBOR head written by {@linkcode encodeValue} (or by another
 * writer that follows `docs/PROTOCOL.md`).
 *
 * Binary values are views into `head` or `attachmentArea` when their
 * alignment allows (no copy), copies otherwise; an `ArrayBuffer` is always a
 * copy. Integers beyond the safe range decode as `bigint`.
 *
 * What decoding may build is bounded as well as what it reads: each
 * container, view, copy and object it creates is charged its estimated size
 * against a budget of {@linkcode DECODE_BASE_BYTES} plus
 * {@linkcode DECODE_BYTES_PER_FRAME_BYTE} per byte of head and area, so a
 * small frame cannot expand into gigabytes (a byte `0x80` is an empty array,
 * some 40 bytes of memory). Decoding time is linear in the input.
 *
 * @param head The CBOR bytes: exactly one data item.
 * @param attachmentArea The bytes after the head in the frame payload.
 * @param options The memory budget.
 * @returns The decoded value.
 * @throws {ProtocolError} when the bytes are not one well-formed value of the
 * protocol: truncated, trailing bytes, indefinite lengths, reserved or
 * unknown codes, unknown tags, invalid UTF-8, nesting deeper than 512, an
 * attachment range outside the area, a value over the memory budget, and so
 * on.
 */
export function decodeValue(
  head: Uint8Array,
  attachmentArea?: Uint8Array,
  options?: DecodeValueOptions,
): unknown {
  // A custom type's decode that decodes a value itself gets state of its
  // own; its objects under construction stay on the shared stack.
  const outer = decoding ? saveDecoderState() : undefined;
  // Byte strings decode as plain Uint8Array views, even from a Node Buffer.
  data = head.constructor === Uint8Array
    ? head
    : new Uint8Array(head.buffer, head.byteOffset, head.byteLength);
  dataView = undefined;
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
  const max = options?.maxBuildBytes;
  budget = max ??
    DECODE_BASE_BYTES +
      DECODE_BYTES_PER_FRAME_BYTE * (data.byteLength + area.byteLength);
  budgetLimit = budget;
  if (outer === undefined) shapesMade = 0;
  decoding = true;
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
    if (outer !== undefined) {
      restoreDecoderState(outer);
    } else {
      decoding = false;
      // A loop: Array.prototype.fill cost more for the few slots used.
      for (let i = 0; i < stackHigh; i++) stack[i] = undefined;
      stackHigh = 0;
      stackTop = 0;
      data = EMPTY_BYTES;
      dataView = undefined;
      area = EMPTY_BYTES;
    }
  }
}

/** What a nested decode saves of the one around it. */
interface DecoderState {
  data: Uint8Array;
  dataView: DataView | undefined;
  at: number;
  end: number;
  area: Uint8Array;
  budget: number;
  budgetLimit: number;
  stackTop: number;
}

function saveDecoderState(): DecoderState {
  return { data, dataView, at, end, area, budget, budgetLimit, stackTop };
}

function restoreDecoderState(state: DecoderState): void {
  data = state.data;
  dataView = state.dataView;
  at = state.at;
  end = state.end;
  area = state.area;
  budget = state.budget;
  budgetLimit = state.budgetLimit;
  stackTop = state.stackTop;
}

/** `dataView`, made if not yet. */
function view(): DataView {
  return dataView ??= new DataView(
    data.buffer,
    data.byteOffset,
    data.byteLength,
  );
}

/** The big-endian uint32 at `i` of `data` (the caller checked the bounds). */
function uint32At(i: number): number {
  return ((data[i]! << 24) | (data[i + 1]! << 16) | (data[i + 2]! << 8) |
    data[i + 3]!) >>> 0;
}

function malformed(detail: string): ProtocolError {
  return new ProtocolError(`Cannot decode value: ${detail} (at byte ${at})`);
}

/**
 * Charges `cost` estimated bytes to the budget, before they are allocated.
 *
 * @param cost Bytes.
 */
function spend(cost: number): void {
  budget -= cost;
  if (budget < 0) {
    throw malformed(
      `building the value would take more than ${budgetLimit} bytes of memory, the budget of a ${
        data.byteLength + area.byteLength
      }-byte frame (${DECODE_BASE_BYTES} bytes plus ${DECODE_BYTES_PER_FRAME_BYTE} per byte)`,
    );
  }
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
      const n = uint32At(at);
      at += 4;
      return n;
    }
    case 27: {
      if (at + 8 > end) throw truncated();
      const n = uint32At(at) * TWO_POW_32 +
        uint32At(at + 4);
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
      spend(VIEW_COST);
      const bytes = data.subarray(at, at + n);
      at += n;
      return bytes;
    }
    case 3:
      return readText(readLength(info, 1));
    case 4: {
      const n = readLength(info, 1);
      if (depth > MAX_DEPTH) throw tooDeep();
      spend(ARRAY_COST + SLOT_COST * n);
      const d = depth + 1;
      // Short arrays as literals: packed, made with their final length.
      switch (n) {
        case 0:
          return [];
        case 1:
          return [decodeItem(d)];
        case 2:
          return [decodeItem(d), decodeItem(d)];
        case 3:
          return [decodeItem(d), decodeItem(d), decodeItem(d)];
        case 4:
          return [decodeItem(d), decodeItem(d), decodeItem(d), decodeItem(d)];
      }
      // A long array grows as its items arrive, so that memory follows what
      // was really decoded, not what the length claims.
      const array = n <= PREALLOCATE_MAX_ITEMS ? new Array<unknown>(n) : [];
      for (let i = 0; i < n; i++) array[i] = decodeItem(depth + 1);
      return array;
    }
    case 5: {
      const n = readLength(info, 2);
      if (depth > MAX_DEPTH) throw tooDeep();
      spend(OBJECT_COST + PROPERTY_COST * n);
      return n > 0 && n <= MAX_SHAPE_KEYS
        ? readObjectShaped(n, depth)
        : readObjectEntries(n, depth);
    }
    case 6:
      return decodeTag(info < 24 ? info : readArgument(info), depth);
    default:
      // false, true, null, undefined: without a call.
      if (info >= 20 && info <= 23) return SIMPLE_VALUES[info - 20];
      return decodeSimple(info);
  }
}

/** The simple values 20 to 23. */
const SIMPLE_VALUES: readonly unknown[] = [false, true, null, undefined];

function readUint64(negative: boolean): number | bigint {
  if (at + 8 > end) throw truncated();
  const hi = uint32At(at);
  const lo = uint32At(at + 4);
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
      const n = view().getFloat32(at);
      at += 4;
      return n;
    }
    case 27: {
      if (at + 8 > end) throw truncated();
      const n = view().getFloat64(at);
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
  if (n === 1) {
    // One ASCII character: engines keep these strings, no cache needed.
    const c = data[at]!;
    if (c < 0x80) {
      at++;
      return String.fromCharCode(c);
    }
  }
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

// ---------------------------------------------------------------------------
// Object shapes: rows of objects with the same keys, built at once
// ---------------------------------------------------------------------------

/** The shape last used at each depth (mod 16), tried first. */
const lastShapes: (Shape | undefined)[] = new Array<Shape | undefined>(16)
  .fill(undefined);
/** Shapes compiled by this decode. */
let shapesMade = 0;
/** Whether a decode is running (a custom type's decode may start another). */
let decoding = false;
/** Values of the objects being built, above `stackTop`. */
const stack: unknown[] = [];
let stackTop = 0;
let stackHigh = 0;

/** Whether the key bytes at `at` are key `i` of `shape` (then skips them). */
function matchKey(shape: Shape, i: number): boolean {
  const from = shape.starts[i]!;
  const n = shape.starts[i + 1]! - from;
  if (at + n > end) return false;
  const bytes = shape.bytes;
  for (let j = 0; j < n; j++) {
    if (data[at + j] !== bytes[from + j]) return false;
  }
  at += n;
  return true;
}

/**
 * Reads a plain object whose keys may follow a known shape: the keys are
 * compared as bytes and the object is made by one literal, which engines
 * build with its final layout (key-by-key stores move it through a layout
 * per key). The first key that differs falls back to key-by-key reading.
 */
function readObjectShaped(n: number, depth: number): Record<string, unknown> {
  const slot = depth & 15;
  let shape = lastShapes[slot];
  // The shape last built at this depth (rows repeat): its first key's bytes
  // are checked as they are, without reading the key as text.
  if (shape === undefined || shape.keys.length !== n || !matchKey(shape, 0)) {
    const start = at;
    const first = readKey();
    shape = shapeOf(first);
    if (shape === undefined || shape.keys.length !== n) {
      return readObjectLearning(first, start, n, depth);
    }
    lastShapes[slot] = shape;
  }
  const base = stackTop;
  stackTop = base + n;
  if (stackTop > stackHigh) stackHigh = stackTop;
  stack[base] = decodeItem(depth + 1);
  for (let i = 1; i < n; i++) {
    if (!matchKey(shape, i)) {
      // Another shape after all: what was read so far, then key by key.
      const object: Record<string, unknown> = {};
      for (let j = 0; j < i; j++) object[shape.keys[j]!] = stack[base + j];
      stackTop = base;
      return readEntriesInto(object, i, n, depth);
    }
    stack[base + i] = decodeItem(depth + 1);
  }
  const object = shape.build(stack, base);
  stackTop = base;
  return object;
}

/**
 * Reads a plain object key by key, then remembers its keys as a shape if
 * they can be one (names of a literal, none repeated).
 */
function readObjectLearning(
  first: string,
  start: number,
  n: number,
  depth: number,
): Record<string, unknown> {
  const keys: string[] = [first];
  /** Where each encoded key starts in the head, and its length. */
  const ranges: number[] = [start, at - start];
  const object: Record<string, unknown> = {};
  setEntry(object, first, decodeItem(depth + 1));
  for (let i = 1; i < n; i++) {
    const keyAt = at;
    const key = readKey();
    ranges.push(keyAt, at - keyAt);
    keys.push(key);
    setEntry(object, key, decodeItem(depth + 1));
  }
  if (shapesMade < MAX_SHAPES_PER_DECODE && learnShape(keys, data, ranges)) {
    shapesMade++;
  }
  return object;
}

function setEntry(
  object: Record<string, unknown>,
  key: string,
  value: unknown,
): void {
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

/** Reads entries `from` to `n` of a plain object into it. */
function readEntriesInto(
  object: Record<string, unknown>,
  from: number,
  n: number,
  depth: number,
): Record<string, unknown> {
  for (let i = from; i < n; i++) {
    const key = readKey();
    setEntry(object, key, decodeItem(depth + 1));
  }
  return object;
}

/** Reads the text key of a plain object's entry. */
function readKey(): string {
  return readTextItem("a map key of a plain object");
}

/** Reads the `n` entries of a plain object of no learnt shape. */
function readObjectEntries(n: number, depth: number): Record<string, unknown> {
  return readEntriesInto({}, 0, n, depth);
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

/** Decodes the item a tag wraps (the tag's own bytes read). */
function decodeTag(tag: number, depth: number): unknown {
  switch (tag) {
    case TAG_DATE:
      spend(DATE_COST);
      return secondsToDate(readNumberItem());
    case TAG_BIGNUM:
      return readBignum();
    case TAG_NEGATIVE_BIGNUM:
      return -1n - readBignum();
    case TAG_URL:
      return readUrl();
    case TAG_REGEXP:
      return readRegExp();
    case TAG_SET:
      return readSet(depth);
    case TAG_MAP:
      return readMap(depth);
    case TAG_ATTACHMENT:
      return readAttachment();
    case TAG_ERROR:
      return readError(depth);
    case TAG_ARRAY_BUFFER: {
      const bytes = readBinary();
      spend(BUFFER_COST + bytes.byteLength);
      return bytes.buffer.slice(
        bytes.byteOffset,
        bytes.byteOffset + bytes.byteLength,
      );
    }
    case TAG_DATA_VIEW: {
      const bytes = readBinary();
      spend(VIEW_COST);
      return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    }
    case TAG_CUSTOM:
      return readCustom(depth);
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

/** Reads the content of a URL (tag 32). */
function readUrl(): URL {
  const href = readTextItem("the content of a URL (tag 32)");
  spend(URL_COST + href.length);
  try {
    return new (URL_CLASS as typeof URL)(href);
  } catch {
    throw malformed("a URL (tag 32) that does not parse");
  }
}

/** Reads the array a Set (tag 258) wraps. */
function readSet(depth: number): Set<unknown> {
  const n = readContainerHeader(
    4,
    1,
    "a Set (tag 258) that does not wrap an array",
  );
  if (depth > MAX_DEPTH) throw tooDeep();
  spend(SET_COST + (SLOT_COST + ENTRY_COST) * n);
  const set = new Set<unknown>();
  for (let i = 0; i < n; i++) set.add(decodeItem(depth + 1));
  return set;
}

/** Reads the map a Map (tag 259) wraps. */
function readMap(depth: number): Map<unknown, unknown> {
  const n = readContainerHeader(
    5,
    2,
    "a Map (tag 259) that does not wrap a map",
  );
  if (depth > MAX_DEPTH) throw tooDeep();
  spend(MAP_COST + (SLOT_COST + ENTRY_COST) * n);
  const map = new Map<unknown, unknown>();
  for (let i = 0; i < n; i++) {
    const key = decodeItem(depth + 1);
    map.set(key, decodeItem(depth + 1));
  }
  return map;
}

/** Reads the map an error (tag 27001) wraps, and builds the error. */
function readError(depth: number): unknown {
  const n = readContainerHeader(
    5,
    2,
    "an error (tag 27001) that does not wrap a map",
  );
  if (depth > MAX_DEPTH) throw tooDeep();
  spend(ERROR_COST + OBJECT_COST + PROPERTY_COST * n);
  return buildError(readObjectEntries(n, depth));
}

/** Reads a custom type's `[name, data]` (tag 27010) and decodes it. */
function readCustom(depth: number): unknown {
  const n = readContainerHeader(
    4,
    1,
    "a custom type (tag 27010) that does not wrap [name, data]",
  );
  if (n !== 2) {
    throw malformed("a custom type (tag 27010) that is not [name, data]");
  }
  if (depth > MAX_DEPTH) throw tooDeep();
  spend(CUSTOM_COST);
  const name = readTextItem("a custom type name");
  const data = decodeItem(depth + 1);
  const type = customTypeByName(name);
  const shown = JSON.stringify(
    name.length > 60 ? `${name.slice(0, 60)}…` : name,
  );
  if (!type) {
    throw malformed(
      `a value of custom type ${shown}, which is not registered in this process (call registerType on both sides)`,
    );
  }
  try {
    return type.decode(data);
  } catch (error: unknown) {
    throw new ProtocolError(
      `Cannot decode value: the decode function of custom type ${shown} threw (at byte ${at})`,
      { cause: error },
    );
  }
}

/** Reads an integer or a float (the content of a date). */
function readNumberItem(): number {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  if (initial === 0xfb && at + 9 <= end) {
    // The float64 every writer of this protocol uses.
    const n = view().getFloat64(at + 1);
    at += 9;
    return n;
  }
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

/** The ASCII codes of the hex digits. */
const HEX_DIGITS = new TextEncoder().encode("0123456789abcdef");
const asciiDecoder = new TextDecoder("latin1");

function readBignum(): bigint {
  if (at >= end) throw truncated();
  const initial = data[at]!;
  if (initial >> 5 !== 2) {
    throw malformed("a bignum (tag 2 or 3) that does not wrap a byte string");
  }
  at++;
  const n = readLength(initial & 31, 1);
  spend(BIGNUM_COST + n);
  const start = at;
  at += n;
  if (n <= 6) {
    let value = 0;
    for (let i = 0; i < n; i++) value = value * 256 + data[start + i]!;
    return BigInt(value);
  }
  if (n === 8) return view().getBigUint64(start);
  // Hex digits written as bytes and decoded at once: a string grown by
  // one byte at a time cost 0.5 s for a 1 MiB bignum.
  const hex = new Uint8Array(2 + 2 * n);
  hex[0] = 0x30; // "0"
  hex[1] = 0x78; // "x"
  for (let i = 0; i < n; i++) {
    const byte = data[start + i]!;
    hex[2 + 2 * i] = HEX_DIGITS[byte >> 4]!;
    hex[3 + 2 * i] = HEX_DIGITS[byte & 15]!;
  }
  return BigInt(asciiDecoder.decode(hex));
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
  spend(REGEXP_COST + source.length);
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
    spend(VIEW_COST);
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
  spend(VIEW_COST);
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
  spend(VIEW_COST);
  if (!LITTLE_ENDIAN && size > 1) {
    spend(BUFFER_COST + bytes.byteLength);
    return new ctor(swapBytes(bytes, size).buffer, 0, length);
  }
  if (bytes.byteOffset % size === 0) {
    return new ctor(bytes.buffer, bytes.byteOffset, length);
  }
  spend(BUFFER_COST + bytes.byteLength);
  return new ctor(bytes.slice().buffer, 0, length);
}
