/**
 * The parent-death watchdog: the fallback that ends a worker whose parent
 * died when nothing else will. Where it can, the parent wraps each worker in
 * `setpriv --pdeathsig KILL` (and bubblewrap's `--die-with-parent`), so the
 * kernel kills the worker with its parent; and a worker whose stdin reaches
 * end-of-file exits. Neither helps a worker stuck in synchronous code on a
 * system without `setpriv` (macOS, minimal images, a `launcher`): its main
 * thread never sees end-of-file. This watchdog runs on its own thread (a
 * JavaScript `Worker`), polls the parent pid, and SIGKILLs the worker's
 * process group, then the worker, once the parent pid changes (the orphan
 * was adopted by init or a subreaper).
 *
 * `Deno.exit()` and `process.exit()` called on a worker thread end that
 * thread only, on both runtimes; a SIGKILL sent to the process itself ends
 * it from any thread (Deno allows signalling its own pid without `run`
 * permission).
 *
 * @module
 */

/** How often the watchdog checks the parent pid, in ms. */
export const PARENT_WATCHDOG_INTERVAL_MS = 200;

/** A running watchdog. */
export interface ParentWatchdog {
  /** Stops the watchdog thread. */
  stop(): void;
}

/**
 * The source of the watchdog thread: a module that polls `process.ppid` and
 * kills this process when it differs from `parentPid`. It uses `node:process`,
 * which both runtimes provide on worker threads.
 *
 * @param parentPid The parent pid this process started with.
 * @param intervalMs How often to check.
 * @returns The module source.
 */
export function watchdogSource(parentPid: number, intervalMs: number): string {
  return `import process from "node:process";
const parent = ${JSON.stringify(parentPid)};
setInterval(() => {
  if (process.ppid === parent) return;
  try {
    process.kill(-process.pid, "SIGKILL");
  } catch {
    // Not a process group leader.
  }
  process.kill(process.pid, "SIGKILL");
}, ${JSON.stringify(intervalMs)});
`;
}

/**
 * Starts the watchdog thread, unless the parent is already init (pid 1 or
 * less), in which case there is no parent death to watch for.
 *
 * @param parentPid The parent pid this process started with (read it first
 *   thing, before anything slow).
 * @param intervalMs How often to check.
 * @returns The watchdog, or `undefined` when none was started.
 * @throws {Error} when the runtime cannot start a worker thread.
 */
export function startParentWatchdog(
  parentPid: number,
  intervalMs: number = PARENT_WATCHDOG_INTERVAL_MS,
): ParentWatchdog | undefined {
  if (!Number.isSafeInteger(parentPid) || parentPid <= 1) return undefined;
  const url = URL.createObjectURL(
    new Blob([watchdogSource(parentPid, intervalMs)], {
      type: "application/javascript",
    }),
  );
  const thread = new Worker(url, { type: "module" });
  // Bun: the thread alone must not keep the process alive.
  (thread as unknown as { unref?: () => void }).unref?.();
  return {
    stop() {
      thread.terminate();
      URL.revokeObjectURL(url);
    },
  };
}
