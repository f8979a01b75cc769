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

/** One read of a {@linkcode ChunkReader}. */
export interface ChunkRead {
  /** Whether the stream has ended. */
  done: boolean;
  /** The chunk read. */
  value?: Uint8Array | undefined;
  /**
   * Whether `value` was read into the frame space (`FrameSpace.space()`):
   * it goes to `FrameSpace.filled()`, not pushed as a chunk.
   */
  inPlace?: boolean;
}

/** Reads a stream chunk by chunk. */
export interface ChunkReader {
  /**
   * The next chunk (`value`), or `done` once the stream has ended: the
   * stream reader's own result where it can be (no promise step between).
   */
  read(): Promise<ChunkRead>;
  /** Stops reading and releases the stream. */
  cancel(): Promise<void>;
}

/** Where a frame being assembled wants its remaining bytes (`FrameReader`). */
export interface FrameSpace {
  /** The unfilled part of a frame; `undefined` when no frame is partly read. */
  space(): Uint8Array | undefined;
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
 * partly read goes straight into that frame's space (this reader lends it
 * to the stream, the frame reader knows nothing of it): a frame of many MiB
 * is then neither copied nor read through a fresh 64 KiB buffer per read;
 * such a read comes back `inPlace`, for the frame reader's `filled()`.
 *
 * @param stream The stream (a child's stdout).
 * @param frames The frame reader fed with the chunks, if reads may go into
 * its frames' space; each chunk read must then reach it (pushed, or
 * `filled()` when `inPlace`) before the next read.
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
      const space = frames?.space();
      if (space !== undefined) {
        // The read transfers the frame's buffer: the view it gives back is
        // on the moved buffer, which the frame reader takes as its own.
        const { value, done } = await byob.read(space);
        return done || value === undefined
          ? END
          : { done: false, value, inPlace: true };
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
