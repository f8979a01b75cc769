/**
 * The frame reader: finds frames (frame_header.ts has their 16-byte header)
 * in a byte stream, hands bytes that are not frames to a stray-output
 * callback, and checks every claimed length against `maxFrameBytes` before
 * it allocates.
 * Pure: no I/O, no globals. See docs/PROTOCOL.md.
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";
import {
  DEFAULT_MAX_FRAME_BYTES,
  type Frame,
  FRAME_HEADER_BYTES,
  PROTOCOL_VERSION,
} from "./frame_header.ts";

/** Reads an unsigned 32-bit big-endian integer at `at`. */
function readUint32(data: Uint8Array, at: number): number {
  return (
    ((data[at] as number) << 24 | (data[at + 1] as number) << 16 |
      (data[at + 2] as number) << 8 | (data[at + 3] as number)) >>> 0
  );
}

/** The attachment area of a frame that has none (nothing to overwrite). */
const NO_AREA = new Uint8Array(0);

/** What {@linkcode FrameReader.end} found at end-of-file. */
export interface FrameReaderEnd {
  /** A frame was cut short: how many payload bytes it claimed and how many arrived. */
  truncated?: { expectedBytes: number; receivedBytes: number } | undefined;
}

/** Options of {@linkcode FrameReader}. */
export interface FrameReaderOptions {
  /** Largest payload accepted; a larger claimed length is a `ProtocolError`. */
  maxFrameBytes?: number;
  /** Receives each whole frame, in order. */
  onFrame: (frame: Frame) => void;
  /** Receives bytes that are not frames (a library printing to stdout). */
  onStray: (bytes: Uint8Array) => void;
}

function findMagic(data: Uint8Array, from: number, end: number): number {
  let i = data.indexOf(0x89, from);
  while (i !== -1 && i < end) {
    // A magic cut by the end of the data may still complete: report it.
    if (
      (i + 1 >= end || data[i + 1] === 0x41) &&
      (i + 2 >= end || data[i + 2] === 0x4c) &&
      (i + 3 >= end || data[i + 3] === 0x4b)
    ) {
      return i;
    }
    i = data.indexOf(0x89, i + 1);
  }
  return -1;
}

/**
 * Finds frames in a byte stream fed chunk by chunk.
 *
 * Emitted payloads are never overwritten later, so decoded binary values may
 * be views on them; the reader assumes the same of the chunks it is given.
 * After a `ProtocolError` the reader refuses further input.
 */
export class FrameReader {
  #max: number;
  #onFrame: (frame: Frame) => void;
  #onStray: (bytes: Uint8Array) => void;
  /** Bytes kept between pushes: a partial header or a partial magic. */
  #pending: Uint8Array | undefined;
  /**
   * A frame being filled: its payload buffer, bytes filled, head length and
   * payload length (kept apart: a read into {@linkcode space} may move the
   * buffer until its bytes come back through {@linkcode filled}).
   */
  #partial: Uint8Array | undefined;
  #partialFilled = 0;
  #partialHead = 0;
  #partialBytes = 0;
  #failed: ProtocolError | undefined;

  /**
   * Creates a reader.
   *
   * @param options Where frames and stray bytes go, and the size cap.
   */
  constructor(options: FrameReaderOptions) {
    const max = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    this.#max = max;
    this.#onFrame = options.onFrame;
    this.#onStray = options.onStray;
  }

  /** Bytes buffered and not yet emitted (for tests and memory accounting). */
  get bufferedBytes(): number {
    return (this.#pending?.byteLength ?? 0) + this.#partialFilled;
  }

  /**
   * The unfilled part of the frame being assembled, or `undefined` when no
   * frame is partly read. A caller may read the stream's next bytes into it
   * and hand them to {@linkcode filled} instead of pushing a chunk (the rest
   * of a large frame then lands where it belongs, with no copy).
   *
   * @returns The space.
   */
  space(): Uint8Array | undefined {
    if (this.#failed || !this.#partial) return undefined;
    return this.#partial.subarray(this.#partialFilled);
  }

  /**
   * Takes the stream's next bytes, read into {@linkcode space}: `view`
   * holds them right after the bytes already filled, on the frame's buffer
   * or on the buffer a transferring read moved it to.
   *
   * @param view The bytes read.
   * @throws {ProtocolError} when `view` is not that space, or completes a
   *   frame that is then refused downstream.
   */
  filled(view: Uint8Array): void {
    if (this.#failed) throw this.#failed;
    const partial = this.#partial;
    try {
      if (partial === undefined || !this.#inPlace(partial, view)) {
        throw new ProtocolError(
          "Cannot read frame: bytes read in place are not in the frame's space",
        );
      }
      this.#partial = new Uint8Array(view.buffer, 0, this.#partialBytes);
      this.#partialFilled += view.byteLength;
      this.#completeIfFull();
    } catch (error: unknown) {
      this.#refuse(error);
      throw error;
    }
  }

  /**
   * Feeds bytes in.
   *
   * @param chunk The next bytes of the stream.
   * @throws {ProtocolError} when a header is invalid or claims more than `maxFrameBytes`.
   */
  push(chunk: Uint8Array): void {
    if (this.#failed) throw this.#failed;
    try {
      this.#push(chunk);
    } catch (error: unknown) {
      this.#refuse(error);
      throw error;
    }
  }

  /** After a `ProtocolError` the reader refuses further input. */
  #refuse(error: unknown): void {
    if (!(error instanceof ProtocolError)) return;
    this.#failed = error;
    this.#pending = undefined;
    this.#partial = undefined;
  }

  /** Emits the frame being filled once it is whole. */
  #completeIfFull(): void {
    if (this.#partialFilled < this.#partialBytes) return;
    const partial = this.#partial as Uint8Array;
    this.#partial = undefined;
    this.#partialFilled = 0;
    this.#onFrame({
      head: partial.subarray(0, this.#partialHead),
      area: partial.subarray(this.#partialHead),
    });
  }

  #push(chunk: Uint8Array): void {
    const partial = this.#partial;
    if (partial) {
      if (partial.byteLength !== this.#partialBytes) {
        throw new ProtocolError(
          "Cannot read frame: a read took the frame's buffer and did not give it back",
        );
      }
      const take = Math.min(
        this.#partialBytes - this.#partialFilled,
        chunk.byteLength,
      );
      partial.set(
        take === chunk.byteLength ? chunk : chunk.subarray(0, take),
        this.#partialFilled,
      );
      this.#partialFilled += take;
      this.#completeIfFull();
      if (this.#partial !== undefined || take === chunk.byteLength) return;
      chunk = chunk.subarray(take);
    }
    let data = chunk;
    if (this.#pending) {
      const joined = new Uint8Array(
        this.#pending.byteLength + chunk.byteLength,
      );
      joined.set(this.#pending, 0);
      joined.set(chunk, this.#pending.byteLength);
      this.#pending = undefined;
      data = joined;
    }
    this.#scan(data);
  }

  /**
   * Whether `view` is bytes read into the space: right after those filled,
   * on the frame's own buffer (kept, or moved to a new `ArrayBuffer` by a
   * transferring read, which leaves the old one empty), at most the space.
   */
  #inPlace(partial: Uint8Array, view: Uint8Array): boolean {
    const buffer = view.buffer;
    return view.byteOffset === this.#partialFilled &&
      view.byteLength <= this.#partialBytes - this.#partialFilled &&
      buffer.byteLength === this.#partialBytes &&
      (buffer === partial.buffer || partial.byteLength === 0);
  }

  #scan(data: Uint8Array): void {
    const end = data.byteLength;
    let pos = 0;
    while (pos < end) {
      if (
        data[pos] !== 0x89 || (pos + 1 < end && data[pos + 1] !== 0x41) ||
        (pos + 2 < end && data[pos + 2] !== 0x4c) ||
        (pos + 3 < end && data[pos + 3] !== 0x4b)
      ) {
        const next = findMagic(data, pos + 1, end);
        const strayEnd = next === -1 ? end : next;
        this.#onStray(data.subarray(pos, strayEnd));
        pos = strayEnd;
        continue;
      }
      if (end - pos < FRAME_HEADER_BYTES) break;
      const version = data[pos + 4];
      if (version !== PROTOCOL_VERSION) {
        throw new ProtocolError(
          `Cannot read frame: protocol version ${version}, expected ${PROTOCOL_VERSION}`,
        );
      }
      if (data[pos + 5] !== 0 || data[pos + 6] !== 0 || data[pos + 7] !== 0) {
        throw new ProtocolError(
          "Cannot read frame: reserved header bytes are not zero",
        );
      }
      const payload = readUint32(data, pos + 8);
      const head = readUint32(data, pos + 12);
      if (payload > this.#max) {
        throw new ProtocolError(
          `Cannot read frame: length ${payload} exceeds maxFrameBytes ${this.#max}`,
        );
      }
      if (head > payload) {
        throw new ProtocolError(
          `Cannot read frame: head length ${head} exceeds payload length ${payload}`,
        );
      }
      const start = pos + FRAME_HEADER_BYTES;
      const available = end - start;
      if (available >= payload) {
        this.#onFrame({
          head: data.subarray(start, start + head),
          area: head === payload
            ? NO_AREA
            : data.subarray(start + head, start + payload),
        });
        pos = start + payload;
        continue;
      }
      // A frame cut by the end of the chunk is assembled in one buffer of
      // its exact size: each later byte is copied once (joining what is
      // held with every new chunk made a frame trickled a byte at a time
      // cost time quadratic in its size).
      const partial = new Uint8Array(payload);
      partial.set(data.subarray(start, end), 0);
      this.#partial = partial;
      this.#partialFilled = available;
      this.#partialHead = head;
      this.#partialBytes = payload;
      return;
    }
    if (pos < end) this.#pending = data.slice(pos, end);
  }

  /**
   * Marks end-of-file: stray bytes still held are flushed to `onStray`, and a
   * frame cut short is reported.
   *
   * @returns Whether a frame was truncated, and by how much.
   */
  end(): FrameReaderEnd {
    if (this.#partial) {
      const truncated = {
        expectedBytes: this.#partialBytes,
        receivedBytes: this.#partialFilled,
      };
      this.#partial = undefined;
      this.#partialFilled = 0;
      return { truncated };
    }
    const pending = this.#pending;
    this.#pending = undefined;
    if (!pending) return {};
    // What is held is shorter than a header: a frame's payload is held in
    // the partial buffer as soon as its header is complete.
    if (pending.byteLength >= 4) {
      return {
        truncated: {
          expectedBytes: FRAME_HEADER_BYTES,
          receivedBytes: pending.byteLength,
        },
      };
    }
    this.#onStray(pending);
    return {};
  }
}
