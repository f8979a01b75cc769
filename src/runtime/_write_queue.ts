/**
 * Serialises writes of chunk lists to one sink, so concurrent writers never
 * interleave their frames. Private to src/runtime.
 *
 * @module
 */

/**
 * Wraps a function that writes one chunk completely so that calls run one
 * after another, in call order.
 *
 * @param writeAll Writes one chunk completely.
 * @returns A function that writes a list of chunks after every earlier list.
 */
export function serialWriter(
  writeAll: (chunk: Uint8Array) => Promise<void> | void,
): (chunks: readonly Uint8Array[]) => Promise<void> {
  let tail: Promise<void> = Promise.resolve();
  let failure: unknown;
  let failed = false;
  return (chunks) => {
    if (failed) return Promise.reject(failure);
    const run = async (): Promise<void> => {
      if (failed) throw failure;
      try {
        for (const chunk of chunks) await writeAll(chunk);
      } catch (error: unknown) {
        failed = true;
        failure = error;
        throw error;
      }
    };
    const next = tail.then(run, run);
    tail = next.catch(() => {});
    return next;
  };
}
