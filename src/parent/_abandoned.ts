/**
 * The calls a connection abandoned (cancelled, timed out, refused) that its
 * worker may still be running: a grace timer each, past which the worker is
 * killed, and the calls that settle only once stopped (`settle:
 * "stopped"`). Private to src/parent.
 *
 * @module
 */

import { isRunning } from "../runtime/proc.ts";
import { type CallRecord, markExecuted } from "./_call.ts";

/**
 * How long a call settled only once stopped waits, after its worker's
 * spawned process exited, for the worker's own process (which a sandbox
 * wrapper may outlive by moments) to be gone.
 */
const STOPPED_GONE_LIMIT_MS = 2_000;

/** A call abandoned with `settle: "stopped"` and what it rejects with. */
interface Stopping {
  readonly call: CallRecord;
  readonly reason: unknown;
}

/** The abandoned calls of one connection, by request id. */
export class AbandonedCalls {
  /** The grace timer of each abandoned call not answered yet. */
  #grace = new Map<number, ReturnType<typeof setTimeout>>();
  /** Calls that settle once the worker answers them or is gone. */
  #stopping = new Map<number, Stopping>();

  /** Abandoned calls whose handlers may still run in the worker. */
  get running(): number {
    return this.#grace.size;
  }

  /**
   * Gives an abandoned call's handler `graceMs` to stop.
   *
   * @param call The call.
   * @param graceMs How long it may run on.
   * @param overdue Called if it is not answered by then (kills the worker).
   */
  hold(call: CallRecord, graceMs: number, overdue: () => void): void {
    this.#grace.set(
      call.id,
      setTimeout(() => {
        this.#grace.delete(call.id);
        overdue();
      }, graceMs),
    );
  }

  /**
   * Settles an abandoned call: now, or with `settle: "stopped"` once the
   * worker answers it ({@linkcode stopped}) or is gone.
   *
   * @param call The call.
   * @param reason What it rejects with.
   */
  settle(call: CallRecord, reason: unknown): void {
    if (call.settleStopped) {
      this.#stopping.set(call.id, { call, reason });
      return;
    }
    // Written, so perhaps started (a call written ahead may have started
    // in the worker before the answer that let it start was read).
    call.mayHaveRun = true;
    call.reject(reason);
  }

  /**
   * The worker answered an abandoned call: it holds no slot any more.
   *
   * @param id Its request id.
   * @returns Whether it had a grace timer (the worker's occupancy fell).
   */
  release(id: number): boolean {
    const grace = this.#grace.get(id);
    if (grace === undefined) return false;
    clearTimeout(grace);
    this.#grace.delete(id);
    return true;
  }

  /**
   * A call abandoned with `settle: "stopped"` got its answer: the handler
   * no longer runs. `dropped`: it never started; any other answer: it ran
   * to its end (a worker older than message version 4 answers a call it
   * dropped with an error, so there it may have run: `ranToEnd` false).
   *
   * @param id Its request id.
   * @param dropped Whether the worker dropped it unstarted.
   * @param ranToEnd Whether an answer other than `dropped` means it ran.
   */
  stopped(id: number, dropped: boolean, ranToEnd: boolean): void {
    const entry = this.#stopping.get(id);
    if (entry === undefined) return;
    this.#stopping.delete(id);
    if (!dropped) {
      entry.call.mayHaveRun = true;
      if (ranToEnd) markExecuted(entry.reason, "yes");
    }
    entry.call.reject(entry.reason);
  }

  /**
   * The worker exited: no timer is needed any more, and the calls waiting
   * to stop reject once its own process is gone (when `pid` is given: a
   * local one), the handler perhaps cut short.
   *
   * @param pid The worker's own process, when it runs on this machine.
   */
  gone(pid: number | undefined): void {
    for (const timer of this.#grace.values()) clearTimeout(timer);
    this.#grace.clear();
    if (this.#stopping.size === 0) return;
    const entries = [...this.#stopping.values()];
    this.#stopping.clear();
    void rejectOnceGone(entries, pid);
  }
}

async function rejectOnceGone(
  entries: readonly Stopping[],
  pid: number | undefined,
): Promise<void> {
  if (pid !== undefined) {
    const until = Date.now() + STOPPED_GONE_LIMIT_MS;
    while (isRunning(pid) && Date.now() < until) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }
  for (const { call, reason } of entries) {
    call.mayHaveRun = true;
    call.reject(reason);
  }
}
