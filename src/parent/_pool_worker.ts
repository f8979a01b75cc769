/**
 * A pool's record of one worker, and the bookkeeping of replacements started
 * ahead (`maxTasksPerWorker`): a replacement waits on standby, taking no
 * calls, until the worker it replaces retires.
 *
 * @module
 */

import type { Connection } from "./connection.ts";
import type { CallKey } from "./options.ts";
import type { StateStamp } from "./state_scope.ts";
import type { PoolWorkerStats } from "./pool_handle.ts";
import { nextWindow } from "./_pool_policy.ts";

/** One worker of a pool, with what placement and recycling track of it. */
export interface PoolWorker {
  /** Its connection. */
  conn: Connection;
  /** The index of the launcher it runs through (`launchers`; else 0). */
  launcher: number;
  /** When it was ready (ms since the epoch). */
  readyAt: number;
  /** The state it started on (`watch`, `invalidate()`). */
  stamp: StateStamp;
  /** Calls it has been given. */
  calls: number;
  /** It takes no more calls and exits once idle. */
  retiring: boolean;
  /** Whether its replacement (after maxTasksPerWorker) has been started. */
  succeeded: boolean;
  /** That replacement once ready, while it waits on standby. */
  heir: PoolWorker | undefined;
  /** The worker it replaces, while it waits on standby for it to retire. */
  predecessor: PoolWorker | undefined;
  /** Whether it takes no calls yet: its predecessor still serves. */
  standby: boolean;
  /**
   * When it was given its first call (ms since the epoch; 0 before), for its
   * pace: a worker prewarmed or idle before its first call is not slow.
   */
  firstCallAt: number;
  /** Retires it after `idleTimeoutMs` idle. */
  idleTimer: ReturnType<typeof setTimeout> | undefined;
  /** The sticky keys bound to it. */
  keys: Set<CallKey>;
  /** Calls it may hold: `concurrency`, plus `pipeline` if it honours `limit`. */
  capacity: number;
  /**
   * Calls it may have written ahead now (0 up to `capacity - concurrency`),
   * adapted as answers arrive ({@linkcode adaptWindow}).
   */
  window: number;
  /** When it last answered, or was given a call while idle (`performance.now()`). */
  markAt: number;
  /** Calls it had answered then. */
  answered: number;
}

/**
 * A new worker's record, as it joins.
 *
 * @param conn Its connection, ready.
 * @param launcher The index of the launcher it runs through (else 0).
 * @param stamp The state it started on.
 * @param concurrency Calls it runs at once.
 * @returns The record.
 */
export function poolWorker(
  conn: Connection,
  launcher: number,
  stamp: StateStamp,
  concurrency: number,
): PoolWorker {
  return {
    conn,
    launcher,
    readyAt: Date.now(),
    stamp,
    calls: 0,
    retiring: false,
    succeeded: false,
    heir: undefined,
    predecessor: undefined,
    standby: false,
    firstCallAt: 0,
    idleTimer: undefined,
    keys: new Set(),
    capacity: concurrency,
    window: 1,
    markAt: 0,
    answered: 0,
  };
}

/** Workers that take calls (not retiring, not on standby). No array. */
export function liveCount(workers: Iterable<PoolWorker>): number {
  let live = 0;
  for (const worker of workers) {
    if (!worker.retiring && !worker.standby) live++;
  }
  return live;
}

/**
 * Workers serving once every replacement started ahead has taken over:
 * those not replaced, plus the starts in progress and the replacements on
 * standby. At most `max`.
 */
export function servingAfterReplacements(
  workers: Iterable<PoolWorker>,
  starting: number,
): number {
  let serving = starting;
  for (const worker of workers) {
    if (worker.retiring) continue;
    if (worker.standby || !worker.succeeded) serving++;
  }
  return serving;
}

/**
 * A worker leaves (retires or exits): its replacement on standby takes
 * calls from now on; if it was itself on standby, the worker it was to
 * replace may start another replacement.
 */
export function handOver(worker: PoolWorker): void {
  const heir = worker.heir;
  if (heir) {
    worker.heir = undefined;
    heir.predecessor = undefined;
    heir.standby = false;
  }
  const predecessor = worker.predecessor;
  if (predecessor) {
    worker.predecessor = undefined;
    worker.standby = false;
    if (predecessor.heir === worker) {
      predecessor.heir = undefined;
      predecessor.succeeded = false;
    }
  }
}

/** What `stats().perWorker` reports of a worker. */
export function workerStats(worker: PoolWorker): PoolWorkerStats {
  return {
    pid: worker.conn.pid,
    rssBytes: worker.conn.rssBytes(),
    calls: worker.calls,
    running: worker.conn.occupancy,
    retiring: worker.retiring,
    standby: worker.standby,
    keys: worker.keys.size,
    launcher: worker.launcher,
    sandboxes: worker.conn.sandboxes,
    limits: worker.conn.limits,
  };
}

/**
 * (Re)arms a worker's idle timer: `onIdle` runs once it has been idle for
 * `idleTimeoutMs` (0: never), unless it retired or took a call meanwhile.
 * The timer alone does not keep the parent alive.
 */
export function armIdle(
  worker: PoolWorker,
  idleTimeoutMs: number,
  onIdle: () => void,
): void {
  if (worker.idleTimer) clearTimeout(worker.idleTimer);
  worker.idleTimer = undefined;
  if (worker.conn.occupancy > 0 || idleTimeoutMs === 0) return;
  worker.idleTimer = setTimeout(() => {
    worker.idleTimer = undefined;
    if (worker.retiring || worker.conn.occupancy > 0) return;
    onIdle();
  }, idleTimeoutMs);
  (worker.idleTimer as { unref?: () => void }).unref?.();
}

/**
 * Adapts how many calls a worker may have written ahead from the answers
 * read since the last time ({@linkcode nextWindow} decides).
 *
 * @param worker The worker, which has a write-ahead capacity.
 * @param concurrency Calls a worker runs at once.
 * @param queued Calls waiting in the pool's queue.
 */
export function adaptWindow(
  worker: PoolWorker,
  concurrency: number,
  queued: number,
): void {
  const occupancy = worker.conn.occupancy;
  const answered = worker.calls - occupancy;
  const count = answered - worker.answered;
  if (count <= 0) return;
  const now = performance.now();
  const perCallMs = (now - worker.markAt) / count;
  worker.markAt = now;
  worker.answered = answered;
  worker.window = nextWindow({
    window: worker.window,
    room: worker.capacity - concurrency,
    perCallMs,
    occupancy,
    concurrency,
    queued,
  });
}
