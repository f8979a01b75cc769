/**
 * The codec's shared tables: the CBOR tags of the value table in
 * `docs/PROTOCOL.md`, the typed-array kinds and their RFC 8746 tags, and
 * the limits both the encoder and the decoder hold to.
 *
 * @module
 */

/** Containers (arrays, objects, maps, sets, errors) nest at most this deep. */
export const MAX_DEPTH = 512;
/** An error cause chain holds at most this many errors; longer ones are cut. */
export const MAX_ERROR_CHAIN = 16;

export const TAG_DATE = 1;
export const TAG_BIGNUM = 2;
export const TAG_NEGATIVE_BIGNUM = 3;
export const TAG_URL = 32;
export const TAG_REGEXP = 35;
export const TAG_SET = 258;
export const TAG_MAP = 259;
export const TAG_ATTACHMENT = 27000;
export const TAG_ERROR = 27001;
export const TAG_ARRAY_BUFFER = 27002;
export const TAG_DATA_VIEW = 27003;
export const TAG_CUSTOM = 27010;

export const TWO_POW_32 = 0x100000000;
/** `hi` words below this give a 64-bit integer within the safe range. */
export const SAFE_HI_LIMIT = 0x200000;

/** A typed array constructor, as far as the codec needs it. */
export interface TypedArrayConstructor {
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
export const URL_CLASS: typeof URL | undefined = typeof URL === "function"
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
export const TAG_BY_TYPED_ARRAY_NAME = new Map<string, number>(
  TYPED_ARRAYS.map(([tag, name]) => [name, tag]),
);
export const TYPED_ARRAY_BY_TAG = new Map<
  number,
  TypedArrayConstructor | undefined
>(
  TYPED_ARRAYS.map(([tag, , ctor]) => [tag, ctor]),
);

export const LITTLE_ENDIAN =
  new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** Copies bytes, reversing each element (for big-endian hosts). */
export function swapBytes(bytes: Uint8Array, size: number): Uint8Array {
  const out = new Uint8Array(bytes.length);
  for (let i = 0; i < bytes.length; i += size) {
    for (let j = 0; j < size; j++) out[i + j] = bytes[i + size - 1 - j]!;
  }
  return out;
}
