/**
 * Call timing metrics of sessions and pools: wait time (admitted to first
 * written to a worker) and run time (last written to settled) summaries,
 * and utilization, kept since the handle opened or since the last
 * `stats({ reset: true })`. Memory is fixed: one histogram of log-spaced
 * buckets per figure. Private to src/parent.
 *
 * @module
 */

import type { CallMetricsStats, TimingSummary } from "./stats.ts";

/** Smallest bucket bound, in ms (1 microsecond). */
const MIN_MS = 0.001;
/** Ratio between bucket bounds: a percentile is within 4 % of the truth. */
const RATIO = 1.04;
const LOG_RATIO = Math.log(RATIO);
/** Buckets from 1 us to past an hour; longer durations share the last. */
const BUCKETS = Math.ceil(Math.log(3_600_000 / MIN_MS) / LOG_RATIO) + 2;

/** A histogram of durations in log-spaced buckets. */
export class Histogram {
  #counts = new Uint32Array(BUCKETS);
  #count = 0;
  #max = 0;

  /**
   * Records a duration.
   *
   * @param ms The duration in ms.
   */
  record(ms: number): void {
    if (!(ms > MIN_MS)) ms = ms > 0 ? ms : 0;
    const index = ms <= MIN_MS
      ? 0
      : Math.min(BUCKETS - 1, Math.ceil(Math.log(ms / MIN_MS) / LOG_RATIO));
    this.#counts[index]!++;
    this.#count++;
    if (ms > this.#max) this.#max = ms;
  }

  /**
   * The summary of what was recorded.
   *
   * @returns Count, percentiles and max.
   */
  summary(): TimingSummary {
    return {
      count: this.#count,
      p50: this.#quantile(0.5),
      p90: this.#quantile(0.9),
      p99: this.#quantile(0.99),
      max: this.#max,
    };
  }

  #quantile(q: number): number {
    if (this.#count === 0) return 0;
    const rank = Math.max(1, Math.ceil(q * this.#count));
    let seen = 0;
    for (let index = 0; index < BUCKETS; index++) {
      seen += this.#counts[index]!;
      if (seen >= rank) {
        // The bucket's upper bound, never past the largest seen.
        return Math.min(this.#max, MIN_MS * RATIO ** index);
      }
    }
    return this.#max;
  }

  /** Forgets everything recorded. */
  reset(): void {
    this.#counts.fill(0);
    this.#count = 0;
    this.#max = 0;
  }
}

/**
 * The minimum a call record needs for metrics: `admittedAt` is 0 when not
 * measured, {@linkcode ADMITTED} while the call is being admitted (a call
 * written to a worker then waited no time, and costs no clock read), and
 * the clock once it was queued; `sentAt` is 0 until written.
 */
interface TimedCall {
  admittedAt: number;
  sentAt: number;
}

/**
 * While a connection reads a batch of answers (see
 * {@linkcode readingAnswers}): the clock as read once for it, -1 before.
 */
let answersAt = -1;
let readingDepth = 0;

/**
 * Runs `read` (a connection handing the answers of one read to their
 * calls) with one clock reading for the calls it settles: 64 answers of
 * one read cost one `performance.now()`, not 64 (docs/benchmarks.md,
 * "Figures behind the code").
 * Nothing but airlock's own decoding runs meanwhile, except a progress
 * callback, after which the clock is read again
 * ({@linkcode clockMayHaveMoved}).
 *
 * @param read What to run.
 */
export function readingAnswers(read: () => void): void {
  if (readingDepth++ === 0) answersAt = -1;
  try {
    read();
  } finally {
    if (--readingDepth === 0) answersAt = -1;
  }
}

/** User code ran while answers were read: the next settle reads the clock. */
export function clockMayHaveMoved(): void {
  answersAt = -1;
}

function settleClock(): number {
  if (readingDepth === 0) return performance.now();
  if (answersAt < 0) answersAt = performance.now();
  return answersAt;
}

/** `admittedAt` of a call being admitted (no clock read yet). */
export const ADMITTED = -1;

/** Wait and run time summaries and utilization of one session or pool. */
export class CallMetrics {
  /** Calls that can run at once at full use (1 for a session). */
  capacity = 1;
  readonly #wait = new Histogram();
  readonly #run = new Histogram();
  #since = performance.now();
  #running = 0;
  #lastChange = this.#since;
  /** Integral of min(running, capacity) over time since `#since`, in call-ms. */
  #busy = 0;

  #advance(now: number): void {
    this.#busy += Math.min(this.#running, this.capacity) *
      (now - this.#lastChange);
    this.#lastChange = now;
  }

  /**
   * A call is being admitted: call {@linkcode CallMetrics.placed} once the
   * mode ran or queued it.
   *
   * @param call The call.
   */
  admitted(call: TimedCall): void {
    call.admittedAt = ADMITTED;
  }

  /**
   * A call was admitted and run or queued: a queued one starts its wait now
   * (one clock read only for calls that wait).
   *
   * @param call The call.
   */
  placed(call: TimedCall): void {
    if (call.admittedAt === ADMITTED && call.sentAt === 0) {
      call.admittedAt = performance.now();
    }
  }

  /**
   * A call is about to be written to a worker: sets its `sentAt`.
   *
   * @param call The call.
   */
  sending(call: TimedCall): void {
    if (call.admittedAt === 0) return;
    const now = performance.now();
    if (call.sentAt !== 0) {
      // A retry: its run time counts from this attempt.
      call.sentAt = now;
      return;
    }
    call.sentAt = now;
    this.#wait.record(
      call.admittedAt === ADMITTED ? 0 : now - call.admittedAt,
    );
    this.#advance(now);
    this.#running++;
  }

  /**
   * A call settled.
   *
   * @param call The call.
   */
  settled(call: TimedCall): void {
    if (call.admittedAt === 0 || call.sentAt === 0) return;
    const now = settleClock();
    this.#run.record(now - call.sentAt);
    this.#advance(now);
    this.#running--;
  }

  /**
   * The figures, and optionally a fresh start.
   *
   * @param reset Whether to start new figures after reading these.
   * @returns The figures.
   */
  stats(reset: boolean): CallMetricsStats {
    const now = performance.now();
    this.#advance(now);
    const measuredMs = now - this.#since;
    const figures: CallMetricsStats = {
      waitMs: this.#wait.summary(),
      runMs: this.#run.summary(),
      utilization: measuredMs > 0
        ? Math.min(1, this.#busy / (measuredMs * this.capacity))
        : 0,
      measuredMs,
    };
    if (reset) {
      this.#wait.reset();
      this.#run.reset();
      this.#since = now;
      this.#busy = 0;
    }
    return figures;
  }
}
