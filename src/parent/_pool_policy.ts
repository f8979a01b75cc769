/**
 * Where a pool puts a call and when it paces a replacement, as pure
 * functions of what the pool knows: no timers, no processes, no clock
 * (callers pass the time). `tests/parent/pool_policy_test.ts` holds their
 * tables.
 *
 * @module
 */

/**
 * A worker whose answers came slower than this many ms per call (as the
 * parent sees them: from the answers before, or from when it was given a call
 * while idle) gets nothing written ahead until its window regrows, nor does a
 * busy worker that has not answered for that long: calls written ahead behind
 * long calls would wait although another worker may be free.
 */
export const LONG_CALL_MS = 4;

/**
 * How long a pool whose start ran out of file descriptors serves with the
 * workers it has before it tries to start more (a worker's exit ends the
 * pause at once).
 */
export const DESCRIPTOR_PAUSE_MS = 5_000;

/**
 * After a start ran out of file descriptors while other workers serve or
 * start: the most workers to run until `until` (ms since the epoch), or
 * until a worker exits (`workers` back to `Infinity`).
 */
export interface DescriptorCap {
  /** The most workers meanwhile (`Infinity`: no cap). */
  workers: number;
  /** When the cap ends. */
  until: number;
}

/**
 * The cap after a start ran out of descriptors: the workers that fit, for
 * {@linkcode DESCRIPTOR_PAUSE_MS}.
 *
 * @param fit Workers serving or starting now.
 * @param now The time (ms since the epoch).
 * @returns The cap.
 */
export function descriptorCap(fit: number, now: number): DescriptorCap {
  return { workers: fit, until: now + DESCRIPTOR_PAUSE_MS };
}

/**
 * `max`, or fewer while a descriptor cap holds.
 *
 * @param max The pool's `max`.
 * @param cap The cap.
 * @param now The time (ms since the epoch).
 * @returns The most workers now.
 */
export function cappedMax(
  max: number,
  cap: DescriptorCap,
  now: number,
): number {
  return cap.workers === Infinity || now >= cap.until
    ? max
    : Math.min(max, cap.workers);
}

/**
 * A replacement (`maxTasksPerWorker`) starts when the calls its worker has
 * left would take this many times the last start, at the worker's pace...
 */
export const REPLACEMENT_LEAD_STARTS = 1.5;

/** ...and no later than its worker's last 1/`REPLACEMENT_LEAD_PARTS` of calls. */
export const REPLACEMENT_LEAD_PARTS = 10;

/**
 * Launchers whose loads differ by this many workers or more get one moved
 * from the most loaded to the least loaded.
 */
export const REBALANCE_GAP = 2;

/** What placement reads of a worker (a pool's worker record has it all). */
export interface PlacementView {
  /** It takes no more calls. */
  readonly retiring: boolean;
  /** A replacement waiting for the worker it replaces to retire. */
  readonly standby: boolean;
  /** Calls it may have written ahead now, beyond `concurrency`. */
  readonly window: number;
  /** When it last answered or was given a call while idle (ms, monotonic). */
  readonly markAt: number;
  /** The sticky keys bound to it. */
  readonly keys: { readonly size: number };
  /** Its connection's state. */
  readonly conn: {
    readonly alive: boolean;
    /** Its liveness is being checked: it takes nothing meanwhile. */
    readonly checking: boolean;
    /** Calls written to it and not answered. */
    readonly occupancy: number;
    /** It runs a stream. */
    readonly streaming: boolean;
  };
}

/**
 * Whether a worker takes another call now: a free slot, or room to write
 * ahead when `ahead` allows it.
 *
 * @param worker The worker.
 * @param concurrency Calls a worker runs at once.
 * @param ahead Whether calls may be written ahead (see {@linkcode aheadOpen}).
 * @param now The time, on `markAt`'s clock.
 * @returns Whether it takes a call.
 */
export function hasRoom(
  worker: PlacementView,
  concurrency: number,
  ahead: boolean,
  now: number,
): boolean {
  const conn = worker.conn;
  if (worker.retiring || worker.standby || !conn.alive || conn.checking) {
    return false;
  }
  const occupancy = conn.occupancy;
  if (occupancy < concurrency) return true;
  // Never written ahead behind a stream, nor behind a call that has run
  // longer than a long call already (no answer for LONG_CALL_MS): either
  // may hold its slot for long.
  return ahead && occupancy < concurrency + worker.window &&
    now - worker.markAt <= LONG_CALL_MS && !conn.streaming;
}

/**
 * The worker with room running the fewest calls (of those, the one with
 * the fewest sticky keys; of those, the first), if any.
 *
 * @param workers The pool's workers, in their order.
 * @param concurrency Calls a worker runs at once.
 * @param ahead Whether calls may be written ahead.
 * @param now The time, on `markAt`'s clock.
 * @returns The worker, or `undefined` when none has room.
 */
export function leastBusy<W extends PlacementView>(
  workers: Iterable<W>,
  concurrency: number,
  ahead: boolean,
  now: number,
): W | undefined {
  let best: W | undefined;
  for (const worker of workers) {
    if (!hasRoom(worker, concurrency, ahead, now)) continue;
    if (
      !best || worker.conn.occupancy < best.conn.occupancy ||
      (worker.conn.occupancy === best.conn.occupancy &&
        worker.keys.size < best.keys.size)
    ) best = worker;
  }
  return best;
}

/**
 * Whether calls may be written ahead to busy workers: only once the pool
 * is at `max` with no worker starting. Before that, queued calls wait for
 * the workers being started (written ahead, they would queue behind a
 * busy worker while a new one sits idle). Replacements started ahead do not
 * count as starting: their workers serve meanwhile.
 *
 * @param starting Worker starts in progress.
 * @param successorStarts Of those, replacements started ahead.
 * @param live Workers taking calls.
 * @param max The most workers now.
 * @returns Whether calls may be written ahead.
 */
export function aheadOpen(
  starting: number,
  successorStarts: number,
  live: number,
  max: number,
): boolean {
  return starting === successorStarts && live + successorStarts >= max;
}

/** What {@linkcode nextWindow} decides from. */
export interface WindowFacts {
  /** The worker's window now. */
  window: number;
  /** The most it may write ahead (`capacity - concurrency`). */
  room: number;
  /** Ms per call of the answers just read. */
  perCallMs: number;
  /** Calls written to it and not answered. */
  occupancy: number;
  /** Calls a worker runs at once. */
  concurrency: number;
  /** Calls waiting in the pool's queue. */
  queued: number;
}

/**
 * How many calls a worker may have written ahead, adapted like a TCP window
 * from the answers just read: it grows (doubling, from 1, up to `room`) when
 * the worker is left with nothing queued behind its running calls while
 * calls wait in the pool's queue (it would idle for a round trip), and
 * closes (0) when its answers came slower than {@linkcode LONG_CALL_MS} per
 * call. Between the two it stays: a worker the parent keeps fed gets no
 * deeper window.
 *
 * @param facts What the answers showed.
 * @returns The new window.
 */
export function nextWindow(facts: WindowFacts): number {
  if (facts.perCallMs > LONG_CALL_MS) return 0;
  if (facts.occupancy <= facts.concurrency && facts.queued > 0) {
    return Math.min(facts.window === 0 ? 1 : facts.window * 2, facts.room);
  }
  return facts.window;
}

/**
 * How many workers to start for the calls still queued that could run on
 * any worker, within `max`.
 *
 * @param placeable Queued calls any worker could run (calls waiting for
 *   their key's busy worker do not count).
 * @param concurrency Calls a worker runs at once.
 * @param starting Worker starts in progress.
 * @param live Workers taking calls.
 * @param max The most workers now.
 * @returns How many to start (0 or less: none).
 */
export function workersToStart(
  placeable: number,
  concurrency: number,
  starting: number,
  live: number,
  max: number,
): number {
  return Math.min(
    Math.ceil(placeable / concurrency) - starting,
    max - live - starting,
  );
}

/** What {@linkcode replacementDue} decides from. */
export interface ReplacementFacts {
  /** `maxTasksPerWorker`. */
  limit: number;
  /** Calls given to the worker, this one included. */
  calls: number;
  /** When it was given its first call (ms). */
  firstCallAt: number;
  /** The time (ms, the same clock). */
  now: number;
  /** How long the pool's last worker start took (ms). */
  startMs: number;
}

/**
 * Whether a worker's replacement should start now, to be ready when the
 * worker retires after `limit` calls: when the calls left would take
 * {@linkcode REPLACEMENT_LEAD_STARTS} times the last start at this worker's
 * pace (measured from its first call on, so from its second call), and no
 * later than its last 1/{@linkcode REPLACEMENT_LEAD_PARTS} of calls.
 *
 * @param facts The worker's calls and pace, the last start's duration.
 * @returns Whether to start its replacement.
 */
export function replacementDue(facts: ReplacementFacts): boolean {
  const { limit, calls } = facts;
  const left = limit - calls;
  if (left <= 0) return false;
  let lead = Math.ceil(limit / REPLACEMENT_LEAD_PARTS);
  if (calls > 1) {
    const msPerCall = (facts.now - facts.firstCallAt) / (calls - 1);
    lead = Math.max(
      lead,
      msPerCall > 0
        ? Math.ceil((REPLACEMENT_LEAD_STARTS * facts.startMs) / msPerCall)
        : limit,
    );
  }
  return left <= lead;
}

/**
 * The launcher to move a worker away from: the most loaded (the first of
 * equals), when it runs at least {@linkcode REBALANCE_GAP} workers more
 * than `low`.
 *
 * @param load Workers serving or starting per launcher.
 * @param low The least loaded launcher in service.
 * @returns The launcher to move one from, or `undefined`.
 */
export function rebalanceSource(
  load: readonly number[],
  low: number,
): number | undefined {
  let high = 0;
  for (let index = 1; index < load.length; index++) {
    if ((load[index] ?? 0) > (load[high] ?? 0)) high = index;
  }
  return (load[high] ?? 0) - (load[low] ?? 0) >= REBALANCE_GAP
    ? high
    : undefined;
}
