/**
 * The memory budget of decoding: what building each kind of value is
 * charged, and how much a frame may build. See `docs/PROTOCOL.md` (Memory
 * budget).
 *
 * @module
 */

/**
 * A frame may decode into this many bytes of memory per byte it carries...
 */
export const DECODE_BYTES_PER_FRAME_BYTE = 8;
/** ...plus this many, so that small frames may take any shape. */
export const DECODE_BASE_BYTES: number = 64 * 1024 * 1024;

// What building each kind of value costs, in estimated bytes of memory (V8
// object sizes on 64-bit; JavaScriptCore's are close). Scalars and strings
// are not counted: each takes at most about 8 bytes per byte of the wire.
export const ARRAY_COST = 32;
export const OBJECT_COST = 56;
export const MAP_COST = 64;
export const SET_COST = 64;
/** Per element of an array or a Set (a slot). */
export const SLOT_COST = 8;
/** Per entry of a plain object (key and value). */
export const PROPERTY_COST = 8;
/** Per entry of a Map or a Set's hash table. */
export const ENTRY_COST = 24;
export const ERROR_COST = 256;
export const DATE_COST = 48;
export const URL_COST = 512;
export const REGEXP_COST = 128;
/** A byte string, typed array or DataView: a view object. */
export const VIEW_COST = 96;
/** A copied buffer, besides its bytes. */
export const BUFFER_COST = 64;
export const BIGNUM_COST = 32;
export const CUSTOM_COST = 64;
