/**
 * Reading a pipe in chunks without a fresh buffer per read: the sizes both
 * sides use (the parent reading a worker's stdout, a Deno worker reading its
 * stdin) and the parent's reader over a Web stream.
 *
 * @module
 */

/** Bytes asked of each read of a pipe. */
export const READ_BYTES = 64 * 1024;
/**
 * Reads of at most this many bytes are copied out and the buffer reused; a
 * larger read keeps the buffer and a fresh one is allocated.
 */
export const COPY_READ_BYTES = 4 * 1024;

/** Reads a stream chunk by chunk. */
export interface ChunkReader {
  /**
   * The next chunk (`value`), or `done` once the stream has ended: the
   * stream reader's own result where it can be (no promise step between).
   */
  read(): Promise<{ done: boolean; value?: Uint8Array | undefined }>;
  /** Stops reading and releases the stream. */
  cancel(): Promise<void>;
}

/** Where a frame being assembled wants its remaining bytes (`FrameReader`). */
export interface FrameSpace {
  /**
   * The unfilled part of a frame, lent to the next read, whose result must
   * be the next chunk pushed; `undefined` when no frame is partly read.
   */
  frameSpace(): Uint8Array | undefined;
}

/** What a reader's read gives at the end. */
const END: { done: true; value: undefined } = { done: true, value: undefined };

/**
 * Reads a stream in chunks. Where the stream is a byte stream (Deno), reads
 * go into one reused buffer, and a small read is copied out: a plain reader
 * would allocate (and zero) a fresh 64 KiB buffer for every read, which a
 * round trip of a few dozen bytes pays for in time and garbage. Every chunk
 * handed out is its own memory, never written again (frames keep views on
 * it). Given the frame reader the chunks go to, a read while a frame is
 * partly read goes straight into that frame's buffer: a frame of many MiB
 * is then neither copied nor read through a fresh 64 KiB buffer per read.
 *
 * @param stream The stream (a child's stdout).
 * @param frames The frame reader fed with the chunks, if reads may go into
 * its frames' buffers; each chunk read must then be pushed to it before the
 * next read.
 * @returns The reader.
 */
export function chunkReader(
  stream: ReadableStream<Uint8Array>,
  frames?: FrameSpace,
): ChunkReader {
  let byob: ReadableStreamBYOBReader;
  try {
    byob = stream.getReader({ mode: "byob" });
  } catch {
    const reader = stream.getReader();
    return {
      read: () => reader.read(),
      cancel: () => reader.cancel(),
    };
  }
  let buffer = new ArrayBuffer(READ_BYTES);
  return {
    async read() {
      const space = frames?.frameSpace();
      if (space !== undefined) {
        // The frame reader takes this view (on the transferred buffer) as
        // the bytes it lent, in place.
        const { value, done } = await byob.read(space);
        return done || value === undefined ? END : { done: false, value };
      }
      const { value, done } = await byob.read(new Uint8Array(buffer));
      if (done || value === undefined) return END;
      if (value.byteLength <= COPY_READ_BYTES) {
        buffer = value.buffer;
        return { done: false, value: value.slice() };
      }
      buffer = new ArrayBuffer(READ_BYTES);
      return { done: false, value };
    },
    cancel: () => byob.cancel(),
  };
}
