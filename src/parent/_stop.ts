/**
 * Ending worker processes: a shutdown's grace steps (asked, then SIGTERM,
 * then SIGKILL), and every live one when the parent itself exits. Private
 * to src/parent.
 *
 * @module
 */

import type { ChildHandle, RuntimeAdapter } from "../runtime/types.ts";

/** The worker processes running now, killed if the parent exits. */
const live = new Set<ChildHandle>();
/** The adapters whose exit hook is installed. */
const exitHooks = new WeakSet<RuntimeAdapter>();

/**
 * Kills a worker process should the parent exit while it runs.
 *
 * @param child The process.
 * @param adapter The runtime whose exit is watched.
 */
export function killAtExit(child: ChildHandle, adapter: RuntimeAdapter): void {
  live.add(child);
  if (exitHooks.has(adapter)) return;
  exitHooks.add(adapter);
  adapter.onExit(() => {
    for (const child of live) child.kill("SIGKILL");
  });
}

/**
 * A worker process is gone: nothing to kill at exit.
 *
 * @param child The process.
 */
export function gone(child: ChildHandle): void {
  live.delete(child);
}

/**
 * Waits for an asked-for exit, then escalates: SIGTERM once `graceMs` has
 * passed, SIGKILL after another `graceMs`.
 *
 * @param child The process.
 * @param closed Settles once it is gone.
 * @param graceMs How long each step may take.
 * @param late Called when the first step ran out (before the SIGTERM).
 */
export async function escalate(
  child: ChildHandle,
  closed: Promise<unknown>,
  graceMs: number,
  late: () => void,
): Promise<void> {
  if (await exitedWithin(closed, graceMs)) return;
  late();
  child.kill("SIGTERM");
  if (await exitedWithin(closed, graceMs)) return;
  child.kill("SIGKILL");
}

function exitedWithin(closed: Promise<unknown>, ms: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    closed.then(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}

/**
 * Whether a promise fulfils within `ms` (a rejection rejects).
 *
 * @param promise The promise.
 * @param ms How long to wait.
 * @returns `true` if it did, `false` once the time is out.
 */
export async function settledWithin(
  promise: Promise<unknown>,
  ms: number,
): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = await Promise.race([
    promise.then(() => true),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]);
  clearTimeout(timer);
  return settled;
}
