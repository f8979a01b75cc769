/**
 * The figures sessions and pools share in their `stats()`: one vocabulary
 * for calls (`calls`, `completed`, `failed`, `timeouts`), worker crashes
 * (`crashed`), recycles by cause (`recycledBy`), and the timing figures
 * (`waitMs`, `runMs`, `utilization`, `measuredMs`) that
 * `stats({ reset: true })` starts afresh.
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

/** A summary of durations, in milliseconds (`stats().waitMs`, `stats().runMs`). */
export interface TimingSummary {
  /** How many durations were recorded. */
  count: number;
  /** The median, in ms (within 4 %; 0 when `count` is 0). */
  p50: number;
  /** The 90th percentile, in ms (within 4 %). */
  p90: number;
  /** The 99th percentile, in ms (within 4 %). */
  p99: number;
  /** The longest, in ms (exact). */
  max: number;
}

/** Options of `stats()`. */
export interface StatsOptions {
  /**
   * Start new timing summaries and utilization after reading these (for
   * periodic export: each read covers the time since the previous one).
   * Counters (`calls`, `completed`, …) are never reset.
   *
   * @default {false}
   */
  reset?: boolean;
}

/** The timing figures `stats()` reports. */
export interface CallMetricsStats {
  /**
   * Time calls waited for a worker: from admission to first started on one
   * (written to it; a call a pool wrote ahead starts when the worker takes
   * it from its queue).
   */
  waitMs: TimingSummary;
  /** Time calls ran: from started on a worker (last attempt) to settled. */
  runMs: TimingSummary;
  /**
   * Share of capacity in use over `measuredMs`, from 0 to 1: for a
   * session, the share of time with at least one call running; for a pool,
   * running calls over `max` times `concurrency`, averaged over time.
   */
  utilization: number;
  /** Milliseconds the timing figures cover (since open or the last reset). */
  measuredMs: number;
}
