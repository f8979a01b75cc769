/**
 * The warm-up of a sandboxed Deno worker's private code cache (see
 * code_cache.ts): before this process's first worker of a module, the parent
 * runs the module once (twice for a cache never warmed) with no grants at
 * all, no environment and no setup, in the OS sandbox, with only the cache
 * writable; stdin is empty, so the worker imports its module, says hello
 * and ends. None runs while the cache's warm mark is current (nothing it
 * compiled changed since an earlier warm-up: warm_mark.ts),
 * so a later process of the same program pays no warm-up start. Asynchronous: the parent's event loop runs on meanwhile (a
 * module that hangs at import stalls nothing but its own start). Concurrent
 * starts of a module share one warm-up; each waits for it at most until its
 * start's deadline and no longer than its caller's abort.
 *
 * @module
 */

import { buildWorkerCommandYielding } from "./command.ts";
import { nextTurn } from "../turns.ts";
import {
  clearLocationData,
  markWarmUpStuck,
  pruneCodeCachesOnce,
  touchCodeCache,
  warmUpStuckRecently,
} from "./code_cache.ts";
import { isWarm, markWarm, warmMarkCurrent } from "./warm_mark.ts";
import { denoProjectFile } from "./deno_command.ts";
import { runtimeBinary } from "./lookups.ts";
import { dirname, fileURLToPath } from "../node_builtins.ts";
import { resolvePermissions } from "../permissions.ts";
import type { ChildHandle, RuntimeAdapter } from "../types.ts";
import type { WorkerCommand, WorkerCommandInput } from "./types.ts";

/** How long one warm-up start may take before the parent kills it. */
export const WARM_UP_TIMEOUT_MS = 10_000;

/** One cache's warm-up in this process. */
interface WarmUp {
  /** Settles once it ended (warmed or not); never rejects. */
  readonly done: Promise<void>;
  /** Whether it ended. */
  finished: boolean;
  /** Starts waiting for it now. */
  waiters: number;
  /** Kills its running start; it ends unmarked. */
  stop(): void;
}

/** A cache whose warm mark was current: no warm-up in this process. */
const WARMED: WarmUp = {
  done: Promise.resolve(),
  finished: true,
  waiters: 0,
  stop() {},
};

/** Warm-ups of this process, by cache directory. */
const warmUps = new Map<string, WarmUp>();

/** Warm-up starts running now (killed when the parent exits). */
const running = new Set<ChildHandle>();

let reaping = false;

/** How many warm-up starts this process spawned. */
let spawned = 0;

/**
 * How many warm-up starts this process spawned (tests count them: a later
 * process of the same program spawns none).
 *
 * @returns The count.
 */
export function warmUpStarts(): number {
  return spawned;
}

/**
 * What the compiled code depends on besides the sources Deno compiled: the
 * Deno binary, the module's file and its project's file (`deno.json`,
 * `deno.jsonc` or `package.json`: imports resolve through it). Paths that
 * cannot be found are left out.
 */
function warmUpSources(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
): string[] {
  const sources: string[] = [];
  try {
    sources.push(runtimeBinary("deno", adapter, input));
  } catch {
    // Not found: the start fails on it anyway.
  }
  if (input.moduleUrl?.protocol === "file:") {
    const module = fileURLToPath(input.moduleUrl);
    sources.push(module);
    const project = input.config ?? denoProjectFile(dirname(module));
    if (project !== undefined) sources.push(project);
  } else if (input.config !== undefined) sources.push(input.config);
  return sources;
}

/** Reads a stream to its end, dropping what it holds. */
async function drain(stream: ReadableStream<Uint8Array>): Promise<void> {
  const reader = stream.getReader();
  try {
    while (!(await reader.read()).done) {
      // Dropped: the warm-up's output means nothing to the parent.
    }
  } catch {
    // The pipe broke: the process is gone.
  }
}

/** A warm-up's current start, so that `stop()` can kill it. */
interface Run {
  stopped: boolean;
  child: ChildHandle | undefined;
  /** Killed at {@linkcode WARM_UP_TIMEOUT_MS}. */
  timedOut: boolean;
}

/**
 * Runs the warm-up command to its end through the runtime's own spawn
 * (exactly its environment and argv: Deno 2.9's `node:child_process` adds
 * the parent's environment and rewrites an argument equal to Deno's path),
 * stdin closed, output dropped, killed after {@linkcode WARM_UP_TIMEOUT_MS}.
 *
 * @returns Whether it started and ended by itself (whatever its exit code).
 */
async function runToEnd(
  adapter: RuntimeAdapter,
  command: WorkerCommand,
  run: Run,
): Promise<boolean> {
  if (run.stopped) return false;
  let child: ChildHandle;
  try {
    child = adapter.spawn(command.spawn);
  } catch {
    return false;
  }
  spawned++;
  run.child = child;
  running.add(child);
  if (!reaping) {
    reaping = true;
    adapter.onExit(() => {
      for (const each of running) each.kill("SIGKILL");
    });
  }
  child.closeStdin();
  const output = Promise.all([drain(child.stdout), drain(child.stderr)]);
  let killed = false;
  const timer = setTimeout(() => {
    killed = true;
    run.timedOut = true;
    child.kill("SIGKILL");
  }, WARM_UP_TIMEOUT_MS);
  const status = await child.exited;
  clearTimeout(timer);
  running.delete(child);
  run.child = undefined;
  await output;
  return !killed && !run.stopped &&
    command.mapExit(status.code, status.signal).signal === null;
}

/** Starts the warm-up of a cache (at most one at a time per cache). */
function startWarmUp(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  dir: string,
  sources: readonly string[],
): WarmUp {
  const run: Run = { stopped: false, child: undefined, timedOut: false };
  let command: WorkerCommand | undefined;
  const warm = async (): Promise<void> => {
    // Built in slices, and spawned in a turn of its own: the worker's own
    // build ran just before, in this turn.
    await nextTurn();
    try {
      command = await buildWorkerCommandYielding(
        {
          ...input,
          permissions: resolvePermissions(undefined, input.cwd),
          env: {},
          launcher: undefined,
        },
        adapter,
        "warm-up",
      );
    } catch {
      return;
    }
    await nextTurn();
    // It runs the module's code: only ever inside the sandbox.
    if (command.sandboxes.length === 0) return;
    // A cache warmed before (by an earlier process) is refreshed with one
    // start: what changed since (the module, its imports, airlock) is
    // compiled again; the rest is found. An empty one needs two (Deno
    // writes the transpiled modules on the first, the rest of the V8 code
    // cache on the second).
    // One ran past its timeout lately (a module that hangs or works long
    // at import): the start does not wait for another.
    if (warmUpStuckRecently(dir)) return;
    const runs = isWarm(dir) ? 1 : 2;
    const since = Date.now();
    for (let i = 0; i < runs; i++) {
      // Not started, killed at its timeout or stopped: not marked.
      if (!(await runToEnd(adapter, command, run))) {
        if (run.timedOut) markWarmUpStuck(dir);
        return;
      }
    }
    try {
      clearLocationData(dir);
      markWarm(dir, sources, since);
    } catch {
      // Warmed anyway; a later process warms it again.
    }
  };
  const warmUp: WarmUp = {
    done: warm().catch(() => {}).finally(() => {
      // Its starts ran in one group: removed once they are all over.
      command?.limits?.release();
      warmUp.finished = true;
    }),
    finished: false,
    waiters: 0,
    stop() {
      run.stopped = true;
      run.child?.kill("SIGKILL");
    },
  };
  return warmUp;
}

/**
 * Warms a sandboxed Deno worker's private code cache before its start, once
 * per cache and process, and not at all while its warm mark is current (a
 * warm-up that no one waits for any more is killed, unmarked, and a later
 * start tries again). A warm-up that fails
 * or times out leaves the cache unmarked: the worker starts all the same,
 * reading what is there (slower, never less confined).
 *
 * @param input The worker's resolved options.
 * @param adapter The parent's runtime.
 * @param command The worker's command, from `buildWorkerCommand`.
 * @param timeoutMs How long this start may wait for it (0: no limit but the
 *   warm-up's own, {@linkcode WARM_UP_TIMEOUT_MS} per start).
 * @param signal The caller's abort: stops the wait at once.
 * @returns `true` once the warm-up ended (or there is none), `false` when
 *   `timeoutMs` passed first.
 * @throws The signal's reason when it aborts.
 */
export async function warmUpCodeCache(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  command: WorkerCommand,
  timeoutMs: number,
  signal?: AbortSignal,
): Promise<boolean> {
  const dir = command.codeCache;
  if (dir === undefined || command.sandboxes.length === 0) return true;
  touchCodeCache(dir);
  pruneCodeCachesOnce(dir);
  signal?.throwIfAborted();
  let warmUp = warmUps.get(dir);
  if (warmUp === undefined) {
    const sources = warmUpSources(input, adapter);
    // Warmed by an earlier process, and nothing it compiled changed since.
    if (warmMarkCurrent(dir, sources)) {
      warmUps.set(dir, WARMED);
      return true;
    }
    warmUp = startWarmUp(input, adapter, dir, sources);
    warmUps.set(dir, warmUp);
  }
  if (warmUp.finished) return true;
  const current = warmUp;
  current.waiters++;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onAbort: (() => void) | undefined;
  try {
    return await new Promise<boolean>((resolve, reject) => {
      current.done.then(() => resolve(true));
      if (timeoutMs > 0) timer = setTimeout(() => resolve(false), timeoutMs);
      if (signal !== undefined) {
        onAbort = () => reject(signal.reason);
        signal.addEventListener("abort", onAbort, { once: true });
      }
    });
  } finally {
    clearTimeout(timer);
    if (onAbort !== undefined) signal?.removeEventListener("abort", onAbort);
    current.waiters--;
    if (current.waiters === 0 && !current.finished) {
      current.stop();
      if (warmUps.get(dir) === current) warmUps.delete(dir);
    }
  }
}
