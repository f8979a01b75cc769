/**
 * The frame header (magic, version, payload length, head length) and the
 * writing of frames; the reading is in frame_reader.ts, which a parent
 * loads only once a worker runs. Pure: no I/O, no globals. See
 * docs/PROTOCOL.md.
 *
 * @module
 */

/** The four bytes every frame starts with: `\x89ALK`. */
export const FRAME_MAGIC: Uint8Array = new Uint8Array([0x89, 0x41, 0x4c, 0x4b]);
/** The protocol version this code speaks. */
export const PROTOCOL_VERSION = 1;
/** Bytes in a frame header. */
export const FRAME_HEADER_BYTES = 16;
/** The default largest payload a reader accepts: 256 MiB. */
export const DEFAULT_MAX_FRAME_BYTES: number = 256 * 1024 * 1024;
/** The largest payload length the header can express. */
export const MAX_FRAME_BYTES_LIMIT = 0xffffffff;

/** One frame's payload, split into the CBOR head and the attachment area. */
export interface Frame {
  /** The encoded message. */
  head: Uint8Array;
  /** The raw bytes of large binary values the head refers to. */
  area: Uint8Array;
}

/**
 * Writes a frame header for a payload into `target` at offset 0.
 *
 * @param target At least {@linkcode FRAME_HEADER_BYTES} bytes.
 * @param headBytes Length of the encoded head.
 * @param areaBytes Length of the attachment area.
 */
export function writeFrameHeader(
  target: Uint8Array,
  headBytes: number,
  areaBytes: number,
): void {
  const payload = headBytes + areaBytes;
  if (payload > MAX_FRAME_BYTES_LIMIT) {
    throw new RangeError(
      `Cannot frame a message of ${payload} bytes: a frame holds at most ${MAX_FRAME_BYTES_LIMIT}`,
    );
  }
  target.set(FRAME_MAGIC, 0);
  target[4] = PROTOCOL_VERSION;
  target[5] = 0;
  target[6] = 0;
  target[7] = 0;
  // Byte by byte, big-endian: a DataView would need `target.buffer`, which
  // on Bun materialises an ArrayBuffer for every small frame (7% of a
  // parent's time at 64 calls in flight).
  target[8] = payload >>> 24;
  target[9] = (payload >>> 16) & 0xff;
  target[10] = (payload >>> 8) & 0xff;
  target[11] = payload & 0xff;
  target[12] = headBytes >>> 24;
  target[13] = (headBytes >>> 16) & 0xff;
  target[14] = (headBytes >>> 8) & 0xff;
  target[15] = headBytes & 0xff;
}

/**
 * Frames a message whose head was encoded after {@linkcode FRAME_HEADER_BYTES}
 * free bytes (`prefixBytes`): the header is written into them, so the head
 * is not copied again.
 *
 * @param prefixed The header space followed by the encoded message.
 * @param attachments The attachment area, in order.
 * @param attachmentBytes Total bytes of `attachments`.
 * @returns The chunks to write, in order.
 */
export function frameInPlace(
  prefixed: Uint8Array,
  attachments: readonly Uint8Array[],
  attachmentBytes: number,
): Uint8Array[] {
  writeFrameHeader(
    prefixed,
    prefixed.byteLength - FRAME_HEADER_BYTES,
    attachmentBytes,
  );
  return attachments.length === 0 ? [prefixed] : [prefixed, ...attachments];
}
