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
});
