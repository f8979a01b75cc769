/**
 * A pool's `launchers`: each entry's health, the options its workers start
 * with, its starts in progress, and the decisions over them (where the next
 * worker starts, which one moves when the loads drift apart, when every
 * entry is set aside).
 *
 * @module
 */

import { AirlockError, WorkerStartError } from "../errors.ts";
import type { ConnectionExit } from "./_exit.ts";
import type { ResolvedPoolOptions, ResolvedWorkerOptions } from "./options.ts";
import { shareFaults } from "./_faults.ts";
import {
  describeLaunchers,
  diedAtConnect,
  EARLY_EXIT_MS,
  freshHealth,
  type LauncherHealth,
  pickLauncher,
  recordFailure,
  recordSuccess,
} from "./_launcher_health.ts";
import type { PoolWorker } from "./_pool_worker.ts";
import { rebalanceSource } from "./_pool_policy.ts";

/** The launchers of one pool (none in a pool without `launchers`). */
export class PoolLaunchers {
  readonly #launchers: ResolvedPoolOptions["launchers"];
  readonly #health: LauncherHealth[] = [];
  readonly #options: ResolvedWorkerOptions[] = [];
  readonly #startingOn: number[] = [];
  /** Looks again once a launcher's backoff has passed. */
  readonly #wake: () => void;
  /** Whether a start that moves a worker to another launcher is on. */
  rebalancing = false;

  constructor(
    options: ResolvedWorkerOptions,
    launchers: ResolvedPoolOptions["launchers"],
    wake: () => void,
  ) {
    this.#launchers = launchers;
    this.#wake = wake;
    for (const launcher of launchers) {
      this.#health.push(freshHealth());
      // One attempt per start: where the next goes is the launchers'
      // health's decision, not a retry on the same host.
      const copy = { ...options, launcher, maxRetries: 0 };
      shareFaults(copy, options);
      this.#options.push(copy);
      this.#startingOn.push(0);
    }
  }

  /** Whether the pool has `launchers`. */
  get used(): boolean {
    return this.#health.length > 0;
  }

  /**
   * Picks the launcher of the next start and counts the start there.
   *
   * @returns Its index and options, or `undefined` when every launcher is
   *   set aside.
   */
  begin(
    workers: Iterable<PoolWorker>,
  ): { launcher: number; options: ResolvedWorkerOptions } | undefined {
    const picked = pickLauncher(this.#health, this.load(workers), Date.now());
    if (picked === undefined) return undefined;
    (this.#startingOn[picked] as number)++;
    return {
      launcher: picked,
      options: this.#options[picked] as ResolvedWorkerOptions,
    };
  }

  /** A start on `launcher` ended (it no longer counts in the load). */
  ended(launcher: number): void {
    (this.#startingOn[launcher] as number)--;
  }

  /** A start on `launcher` succeeded: its failures are forgotten. */
  succeeded(launcher: number): void {
    recordSuccess(this.#health[launcher] as LauncherHealth);
  }

  /**
   * Workers serving or starting on each launcher, as they will be once every
   * replacement started ahead has taken over.
   */
  load(workers: Iterable<PoolWorker>): number[] {
    const load = [...this.#startingOn];
    for (const worker of workers) {
      if (worker.retiring || (worker.succeeded && !worker.standby)) continue;
      load[worker.launcher] = (load[worker.launcher] ?? 0) + 1;
    }
    return load;
  }

  /**
   * Records a failed start of a launcher; once it is set aside, the pool
   * looks again when its backoff has passed (to rebalance, or to start what
   * is needed then).
   */
  failed(launcher: number, error: unknown): void {
    const health = this.#health[launcher] as LauncherHealth;
    if (!recordFailure(health, error, Date.now())) return;
    const timer = setTimeout(
      this.#wake,
      Math.max(0, health.asideUntil - Date.now()) + 1,
    );
    (timer as { unref?: () => void }).unref?.();
  }

  /** A worker that died right after its start counts as its launcher's failure. */
  exited(worker: PoolWorker, exit: ConnectionExit): void {
    if (!this.used) return;
    if (!diedAtConnect(exit.requested, worker.readyAt, Date.now())) return;
    const code = exit.signal ?? `code ${exit.code}`;
    this.failed(
      worker.launcher,
      new AirlockError(
        `its worker (pid ${exit.pid}) exited (${code}) within ${EARLY_EXIT_MS} ms of its start`,
      ),
    );
  }

  /**
   * The worker to move from the most loaded launcher to the least loaded
   * one in service, when they differ by `REBALANCE_GAP` or more (a host
   * back after a loss, or one that came up late).
   */
  toMove(workers: Iterable<PoolWorker>): PoolWorker | undefined {
    if (this.#health.length < 2 || this.rebalancing) return undefined;
    const load = this.load(workers);
    const low = pickLauncher(this.#health, load, Date.now());
    if (low === undefined) return undefined;
    const high = rebalanceSource(load, low);
    if (high === undefined) return undefined;
    for (const worker of workers) {
      if (
        worker.launcher === high && !worker.retiring && !worker.standby &&
        !worker.succeeded && worker.conn.alive
      ) return worker;
    }
    return undefined;
  }

  /**
   * With every launcher set aside: the error naming each one's last
   * failure. `undefined` while one is in service.
   */
  stranded(
    workers: Iterable<PoolWorker>,
    label: string,
  ): WorkerStartError | undefined {
    const now = Date.now();
    if (pickLauncher(this.#health, this.load(workers), now) !== undefined) {
      return undefined;
    }
    return new WorkerStartError({
      module: label,
      failure: "spawn",
      detail: `every launcher is set aside after failed starts: ${
        describeLaunchers(this.#launchers, this.#health, now)
      }`,
      cause: this.#health.at(-1)?.lastFailure,
    });
  }
}
