/**
 * The liveness check a connection makes after a call timed out: a `ping`
 * the worker answers from its event loop. No answer within the grace means
 * the loop is blocked (wedged) and the worker is ended, so the next call
 * runs on a fresh one; an answer means it is slow and keeps its other calls.
 * Private to src/parent.
 *
 * @module
 */

/**
 * How long a worker whose call timed out has to answer the liveness check
 * before it counts as wedged (its event loop blocked, e.g. by a handler
 * stuck in synchronous code) and is ended. Long enough for a loaded
 * machine's scheduling and a GC pause.
 */
export const LIVENESS_GRACE_MS = 1_000;

/** One connection's liveness check, at most one at a time. */
export class LivenessCheck {
  /** The grace timer of the check in progress, if any. */
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** Whether a check is in progress (nothing new should be written). */
  get active(): boolean {
    return this.#timer !== undefined;
  }

  /**
   * Starts a check unless one is in progress.
   *
   * @param wedged Called if no answer comes within
   *   {@linkcode LIVENESS_GRACE_MS}.
   * @returns Whether it started (the caller then writes the `ping`).
   */
  begin(wedged: () => void): boolean {
    if (this.#timer !== undefined) return false;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      wedged();
    }, LIVENESS_GRACE_MS);
    return true;
  }

  /**
   * The worker answered (`pong`).
   *
   * @returns Whether a check was in progress (it ends: the worker is alive).
   */
  answered(): boolean {
    if (this.#timer === undefined) return false;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    return true;
  }

  /** The worker is gone: no check any more. */
  stop(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}
