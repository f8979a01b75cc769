/**
 * Watching for a worker that closed its stdout and kept running (it can
 * never answer again): after the end of its stdout, and, inside the OS
 * sandbox (whose own processes keep the pipe open, so its end is never
 * seen), by checking that the worker still holds the pipe. Private to
 * src/parent.
 *
 * @module
 */

import { holdsFile, isRunning, stdoutTarget } from "../runtime/proc.ts";

/** How long a process may run on after its stdout ended before it is killed. */
const STDOUT_END_GRACE_MS = 1_000;
/** How often a sandboxed worker with calls in flight is checked. */
const STDOUT_CHECK_MS = 1_000;

/**
 * The worker's stdout ended. An exiting process closes it just before its
 * exit is seen; one still running after a grace period closed it on purpose.
 *
 * @param closed Settles once the process is gone.
 * @param running Whether it is still running as far as the owner knows.
 * @param closedOnPurpose Called if it still runs after the grace.
 */
export function afterStdoutEnd(
  closed: Promise<unknown>,
  running: () => boolean,
  closedOnPurpose: () => void,
): void {
  const timer = setTimeout(() => {
    if (running()) closedOnPurpose();
  }, STDOUT_END_GRACE_MS);
  (timer as { unref?: () => void }).unref?.();
  closed.then(() => clearTimeout(timer));
}

/**
 * Starts the watch of a sandboxed local worker, if its stdout is a pipe.
 *
 * @param pid The worker's own pid.
 * @param busy Whether calls are in flight.
 * @param closed Called once it closed its stdout on purpose.
 * @returns The watch, or `undefined` when there is nothing to watch.
 */
export function watchStdout(
  pid: number,
  busy: () => boolean,
  closed: () => void,
): StdoutWatch | undefined {
  const pipe = stdoutTarget(pid);
  // A pipe, or a socket pair (Bun's node:child_process).
  if (!pipe?.startsWith("pipe:") && !pipe?.startsWith("socket:")) {
    return undefined;
  }
  return new StdoutWatch(pid, pipe, busy, closed);
}

/**
 * While calls are in flight, checks once a second that a sandboxed worker
 * still holds its stdout pipe (any descriptor on it). One unref'd timer for
 * the worker's life: nothing on the call path.
 */
export class StdoutWatch {
  /** The worker's pid. */
  #pid: number;
  /** The pipe (or socket) its stdout is, as `/proc` names it. */
  #pipe: string;
  /** Whether the owner has calls in flight (only then is it checked). */
  #busy: () => boolean;
  /** Called once the worker is seen without its stdout twice. */
  #closed: () => void;
  #timer: ReturnType<typeof setInterval> | undefined;
  /** Whether the last check found the pipe missing. */
  #missing = false;

  /**
   * Starts the watch; see {@linkcode watchStdout}.
   *
   * @param pid The worker's own pid.
   * @param pipe What its stdout is, as `/proc` names it.
   * @param busy Whether calls are in flight.
   * @param closed Called once it closed its stdout on purpose.
   */
  constructor(
    pid: number,
    pipe: string,
    busy: () => boolean,
    closed: () => void,
  ) {
    this.#pid = pid;
    this.#pipe = pipe;
    this.#busy = busy;
    this.#closed = closed;
    const timer = setInterval(() => this.#check(), STDOUT_CHECK_MS);
    (timer as { unref?: () => void }).unref?.();
    this.#timer = timer;
  }

  /** Ends the watch. */
  stop(): void {
    if (this.#timer !== undefined) clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #check(): void {
    if (this.#timer === undefined || !this.#busy()) {
      this.#missing = false;
      return;
    }
    // A process being torn down drops its files before it is a zombie:
    // only one seen running without its stdout twice, a check apart, closed
    // it on purpose.
    if (holdsFile(this.#pid, this.#pipe) !== false || !isRunning(this.#pid)) {
      this.#missing = false;
      return;
    }
    if (!this.#missing) {
      this.#missing = true;
      return;
    }
    this.stop();
    this.#closed();
  }
}
