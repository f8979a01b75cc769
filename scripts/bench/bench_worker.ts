/**
 * The airlock worker the benchmarks drive.
 *
 * @module
 */

import { defineWorker } from "../../worker.ts";

export default defineWorker({
  /** The trivial call: (a), (b), (e), (f). */
  add(a: number, b: number): number {
    return a + b;
  },
  /** Sends a value straight back: (c), (d). */
  echo<T>(value: T): T {
    return value;
  },
  /** Streams `n` small rows: the streaming scenario. */
  async *rows(n: number): AsyncGenerator<{ id: number; name: string }> {
    for (let id = 0; id < n; id++) yield { id, name: "row" };
  },
  /** Streams `count` buffers of `size` bytes: the streaming memory check. */
  async *chunks(count: number, size: number): AsyncGenerator<Uint8Array> {
    for (let i = 0; i < count; i++) {
      const chunk = new Uint8Array(size);
      chunk[0] = i & 0xff;
      yield chunk;
    }
  },
  /** The same rows in one array. */
  rowsArray(n: number): { id: number; name: string }[] {
    const rows = new Array<{ id: number; name: string }>(n);
    for (let id = 0; id < n; id++) rows[id] = { id, name: "row" };
    return rows;
  },
});
