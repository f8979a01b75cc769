/**
 * The figures sessions and pools share in their `stats()`: one vocabulary
 * for calls (`calls`, `completed`, `failed`, `timeouts`), worker crashes
 * (`crashed`) and recycles by cause (`recycledBy`).
 *
 * @module
 */

/** Call and crash counters, the same in `session().stats()` and `pool().stats()`. */
export interface CallStats {
  /** Calls admitted (not refused at once) since the session or pool opened. */
  calls: number;
  /** Calls that settled with a value. */
  completed: number;
  /** Calls that settled with an error (remote, timeout, crash, cancel, close). */
  failed: number;
  /** Workers that exited without being asked to. */
  crashed: number;
  /** Calls that passed their deadline. */
  timeouts: number;
}

/** Workers replaced, by cause (`stats().recycledBy`). */
export interface RecycleCounts {
  /** After `maxTasksPerWorker` calls (pools). */
  tasks: number;
  /** Over `maxRssBytes` (pools). */
  memory: number;
  /** A watched path changed. */
  watch: number;
  /** `invalidate()` on the session, pool or a scope. */
  invalidate: number;
  /** The worker died and was replaced. */
  crash: number;
}
