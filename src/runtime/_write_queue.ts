/**
 * Serialises writes of chunk lists to one sink, so concurrent writers never
 * interleave their frames. Private to src/runtime.
 *
 * @module
 */

const RESOLVED: Promise<void> = Promise.resolve();

/** Where {@linkcode capture} leaves a new promise's resolving functions. */
let capturedResolve: () => void = () => {};
let capturedReject: (error: unknown) => void = () => {};

/** One executor for every batch's promise: no closure per batch. */
function capture(
  resolve: () => void,
  reject: (error: unknown) => void,
): void {
  capturedResolve = resolve;
  capturedReject = reject;
}

/** Small chunks written in one turn are copied into one buffer, up to this size each. */
const COALESCE_CHUNK_BYTES = 64 * 1024;
/** The largest buffer small chunks are copied into. */
const COALESCE_MAX_BYTES = 1024 * 1024;

/**
 * Joins runs of small chunks into one buffer each; large chunks stay as they
 * are (no copy).
 */
function coalesce(chunks: Uint8Array[]): Uint8Array[] {
  if (chunks.length < 2) return chunks;
  const out: Uint8Array[] = [];
  let run: Uint8Array[] = [];
  let runBytes = 0;
  const close = (): void => {
    if (run.length === 1) out.push(run[0] as Uint8Array);
    else if (run.length > 1) {
      const joined = new Uint8Array(runBytes);
      let offset = 0;
      for (const chunk of run) {
        joined.set(chunk, offset);
        offset += chunk.byteLength;
      }
      out.push(joined);
    }
    run = [];
    runBytes = 0;
  };
  for (const chunk of chunks) {
    if (chunk.byteLength > COALESCE_CHUNK_BYTES) {
      close();
      out.push(chunk);
      continue;
    }
    if (runBytes + chunk.byteLength > COALESCE_MAX_BYTES) close();
    run.push(chunk);
    runBytes += chunk.byteLength;
  }
  close();
  return out;
}

/**
 * Wraps a function that writes one chunk completely so that lists of chunks
 * are written one after another, in call order, never interleaved.
 *
 * Lists handed in during one turn of the event loop are gathered and written
 * together once the turn's microtasks have run, small chunks copied into one
 * buffer: many frames queued at once (64 calls in flight, or a worker
 * answering several) cost one write instead of one each. They share one
 * promise. When nothing is being written the batch goes to `writeAll` at
 * once, and a `writeAll` that finishes synchronously (returns nothing) costs
 * no further promise. After a failure every later list rejects with the same
 * error.
 *
 * @param writeAll Writes one chunk completely; returns a promise when it
 *   finishes later.
 * @returns A function that writes a list of chunks after every earlier list.
 */
export function serialWriter(
  writeAll: (chunk: Uint8Array) => Promise<void> | void,
): (chunks: readonly Uint8Array[]) => Promise<void> {
  /** Settles (never rejects) once every batch started so far has finished. */
  let tail: Promise<void> = RESOLVED;
  /** Batches started and not finished. */
  let busy = 0;
  let failure: unknown;
  let failed = false;
  /** The batch gathered this turn, its promise and how to settle it. */
  let batch: Uint8Array[] = [];
  let batchDone: Promise<void> | undefined;
  let resolveBatch: () => void = () => {};
  let rejectBatch: (error: unknown) => void = () => {};
  const fail = (error: unknown): void => {
    if (failed) return;
    failed = true;
    failure = error;
  };
  const finish = (): void => {
    busy--;
  };
  const track = (written: Promise<void>): Promise<void> => {
    busy++;
    tail = written.then(finish, finish);
    return written;
  };
  const finishList = async (
    first: Promise<void> | void,
    chunks: readonly Uint8Array[],
    from: number,
  ): Promise<void> => {
    try {
      await first;
      for (let i = from; i < chunks.length; i++) {
        await writeAll(chunks[i] as Uint8Array);
      }
    } catch (error: unknown) {
      fail(error);
      throw error;
    }
  };
  /** Writes a list after earlier ones; RESOLVED when it finished at once. */
  const writeList = (chunks: readonly Uint8Array[]): Promise<void> => {
    if (failed) return Promise.reject(failure);
    if (busy > 0) {
      return track(tail.then(() => {
        if (failed) throw failure;
        return finishList(undefined, chunks, 0);
      }));
    }
    for (let i = 0; i < chunks.length; i++) {
      let result: Promise<void> | void;
      try {
        result = writeAll(chunks[i] as Uint8Array);
      } catch (error: unknown) {
        fail(error);
        return Promise.reject(error);
      }
      if (result !== undefined) {
        return track(finishList(result, chunks, i + 1));
      }
    }
    return RESOLVED;
  };
  const flush = (): void => {
    const chunks = coalesce(batch);
    const resolve = resolveBatch;
    const reject = rejectBatch;
    batch = [];
    batchDone = undefined;
    const written = writeList(chunks);
    if (written === RESOLVED) resolve();
    else written.then(resolve, reject);
  };
  return (chunks) => {
    if (failed) return Promise.reject(failure);
    for (const chunk of chunks) batch.push(chunk);
    if (batchDone === undefined) {
      batchDone = new Promise<void>(capture);
      resolveBatch = capturedResolve;
      rejectBatch = capturedReject;
      queueMicrotask(flush);
    }
    return batchDone;
  };
}
