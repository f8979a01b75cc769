/**
 * An in-memory runtime for tests: a `RuntimeAdapter` whose `spawn` starts no
 * process but runs the real worker side (`runWorker`, hence the real
 * `serve()`) in this process, over a pair of in-memory streams. Sessions,
 * pools and one-shot calls use it unchanged (it is installed where
 * `detect()` looks), so scheduling, deadlines, retries and recycling are
 * tested in milliseconds. Process-level behaviour (signals, pipes, sandbox,
 * memory) stays with the process tests.
 *
 * Limits, by construction: every "worker" shares this process's module cache
 * and event loop, so a handler that blocks synchronously blocks the test, and
 * state kept at module level is shared between workers unless `load` makes a
 * fresh definition per spawn (it does in the examples below). A killed
 * worker's handlers keep running to their end; what they send is dropped.
 *
 * @example
 * ```ts ignore
 * using runtime = memoryRuntime({
 *   load: () => ({ default: defineWorker({ add: (a: number, b: number) => a + b }) }),
 * });
 * await using s = await session(fixture("basic_worker.ts"));
 * assert.equal(await s.call("add", [1, 2]), 3);
 * runtime.live()[0]?.crash("SIGKILL");
 * ```
 *
 * @module
 */

import { detect, replaceAdapter } from "../src/runtime/detect.ts";
import type {
  ChildHandle,
  ExitStatus,
  RuntimeAdapter,
  SpawnRequest,
} from "../src/runtime/types.ts";
import { runWorker } from "../src/worker/main.ts";

/** Above Linux's largest pid (2^22), so no fake pid is a real process. */
const FIRST_PID = 5_000_000;
let nextPid = FIRST_PID;

/** A worker "process" of the in-memory runtime. */
export interface MemoryChild {
  /** Its fake pid (never a real process's). */
  readonly pid: number;
  /** Which spawn of its runtime it was (0-based). */
  readonly index: number;
  /** What was asked to be spawned. */
  readonly request: SpawnRequest;
  /** How it ended, once it has. */
  readonly status: ExitStatus | undefined;
  /** Settles when it has ended. */
  readonly exited: Promise<ExitStatus>;
  /** What it wrote to stderr so far. */
  readonly stderr: string;
  /** Ends it as if killed from outside by `signal`. */
  crash(signal?: string): void;
  /** Ends it as if it had exited by itself with `code`. */
  exit(code: number): void;
}

/** Options of {@linkcode memoryRuntime}. */
export interface MemoryRuntimeOptions {
  /**
   * What a spawned worker runs: returns (or resolves to) a module namespace
   * whose `default` is a `defineWorker(...)` definition. Called once per
   * spawn, so a fresh definition per call means fresh state per worker. A
   * throw is an import failure; a promise that never settles, a worker that
   * never becomes ready.
   *
   * @default imports the worker module named in the spawned command
   */
  load?: (child: MemoryChild) => unknown;
  /**
   * How many of the next spawns fail as if the program were missing.
   *
   * @default {0}
   */
  failSpawns?: number;
}

/** An installed in-memory runtime. Dispose it to uninstall. */
export interface MemoryRuntime {
  /** The adapter `detect()` returns while installed. */
  readonly adapter: RuntimeAdapter;
  /** Every worker spawned so far, in order. */
  readonly children: readonly MemoryChild[];
  /** The workers that have not ended. */
  live(): MemoryChild[];
  /** Makes the next `count` spawns fail as if the program were missing. */
  failSpawns(count: number): void;
  /** Kills every live worker and uninstalls the runtime. */
  [Symbol.dispose](): void;
}

/** The worker module named in a spawn request's argv. */
function moduleOf(request: SpawnRequest): string {
  for (const arg of [...request.argv].reverse()) {
    if (arg.startsWith("data:")) {
      // Deno workers: the main module is a data: URL importing the module.
      const source = decodeURIComponent(arg.slice(arg.indexOf(",") + 1));
      const found = /import\((".*?")\)/.exec(source)?.[1];
      if (found) return JSON.parse(found) as string;
    } else if (/^(file|https?):/.test(arg)) {
      return arg;
    }
  }
  throw new Error(
    `memoryRuntime: no worker module in the argv ${
      JSON.stringify(request.argv)
    }`,
  );
}

function copy(chunks: readonly Uint8Array[]): Uint8Array {
  let length = 0;
  for (const chunk of chunks) length += chunk.byteLength;
  const out = new Uint8Array(length);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

interface Pipe {
  readonly stream: ReadableStream<Uint8Array>;
  /** Whether the reader cancelled it. */
  readonly cancelled: () => boolean;
  push(bytes: Uint8Array): void;
  close(): void;
  fail(error: Error): void;
}

function pipe(): Pipe {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let open = true;
  let cancelled = false;
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel() {
      cancelled = true;
      open = false;
    },
  });
  return {
    stream,
    cancelled: () => cancelled,
    push(bytes) {
      if (open && bytes.byteLength > 0) controller.enqueue(bytes);
    },
    close() {
      if (!open) return;
      open = false;
      controller.close();
    },
    fail(error) {
      if (!open) return;
      open = false;
      controller.error(error);
    },
  };
}

/**
 * Installs an in-memory runtime where `detect()` looks, so `session()`,
 * `pool()` and `oneShot()` spawn in-memory workers until it is disposed.
 * The adapter reports itself as Deno (the Deno command is built and
 * ignored; no sandbox applies to Deno workers with default permissions).
 *
 * @param options What workers run, and spawn faults.
 * @returns The runtime, to inspect and crash its workers.
 */
export function memoryRuntime(
  options: MemoryRuntimeOptions = {},
): MemoryRuntime {
  const host = detect();
  const children: MemoryChild[] = [];
  const live = new Set<MemoryChild>();
  let failures = options.failSpawns ?? 0;
  const encoder = new TextEncoder();

  function spawn(request: SpawnRequest): ChildHandle {
    if (failures > 0) {
      failures--;
      throw new Error(
        `ENOENT: no such file or directory (memoryRuntime: a spawn made to fail)`,
      );
    }
    const stdin = pipe();
    const stdout = pipe();
    const stderr = pipe();
    let status: ExitStatus | undefined;
    let stderrText = "";
    let settle!: (status: ExitStatus) => void;
    const exited = new Promise<ExitStatus>((resolve) => settle = resolve);
    const pid = nextPid++;
    // A child process keeps the event loop alive while referenced (the
    // default), as a real one does: the parent's deadline timers may not.
    let keepAlive: ReturnType<typeof setInterval> | undefined;
    const setRef = (ref: boolean): void => {
      if (ref && status === undefined) {
        keepAlive ??= setInterval(() => {}, 1 << 30);
      } else if (keepAlive !== undefined) {
        clearInterval(keepAlive);
        keepAlive = undefined;
      }
    };
    setRef(true);

    const end = (how: ExitStatus): void => {
      if (status !== undefined) return;
      status = how;
      setRef(false);
      live.delete(child);
      stdin.fail(new Error("EPIPE: the worker process is gone"));
      stdout.close();
      stderr.close();
      // After the pipes, as a real exit status follows the end of output.
      setTimeout(() => settle(how), 0);
    };

    const child: MemoryChild = {
      pid,
      index: children.length,
      request,
      get status() {
        return status;
      },
      exited,
      get stderr() {
        return stderrText;
      },
      crash: (signal = "SIGKILL") => end({ code: null, signal }),
      exit: (code) => end({ code, signal: null }),
    };
    children.push(child);
    live.add(child);

    const worker: RuntimeAdapter = {
      ...parent,
      pid: () => pid,
      ppid: () => host.pid(),
      workerStdio: () => ({
        input: stdin.stream,
        write(chunks) {
          if (status !== undefined) return Promise.resolve();
          if (stdout.cancelled()) {
            return Promise.reject(new Error("EPIPE: broken pipe"));
          }
          stdout.push(copy(chunks));
          return Promise.resolve();
        },
      }),
      writeStderr(text) {
        if (status !== undefined) return;
        stderrText += text;
        stderr.push(encoder.encode(text));
      },
      exit(code) {
        end({ code, signal: null });
        // The real one never returns; here the caller's code goes on, and
        // whatever it sends is dropped.
        return undefined as never;
      },
      onExit() {},
    };

    const load = options.load ?? (() => import(moduleOf(request)));
    // Started on the next turn, as a process is not running at spawn's return.
    setTimeout(() => {
      if (status !== undefined) return;
      runWorker(worker, async () => await load(child), `memory:${pid}`)
        .catch((error: unknown) => {
          worker.writeStderr(
            `memoryRuntime: the worker threw: ${
              error instanceof Error ? error.stack : String(error)
            }\n`,
          );
          end({ code: 70, signal: null });
        });
    }, 0);

    return {
      pid,
      stdout: stdout.stream,
      stderr: stderr.stream,
      exited,
      write(chunks) {
        if (status !== undefined) {
          return Promise.reject(new Error("EPIPE: broken pipe"));
        }
        stdin.push(copy(chunks));
        return Promise.resolve();
      },
      closeStdin: () => stdin.close(),
      kill: (signal) => end({ code: null, signal }),
      setRef,
    };
  }

  const parent: RuntimeAdapter = {
    name: "deno",
    version: `memory (on ${host.name} ${host.version})`,
    execPath: () => host.execPath(),
    pid: () => host.pid(),
    args: () => [],
    ppid: () => host.ppid(),
    cwd: () => host.cwd(),
    env: (name) => host.env(name),
    // Without a Deno cache directory: a sandboxed Deno worker gets no private
    // code cache, so no warm-up start (a child of its own) runs before it and
    // `children` holds only the workers.
    environment: () => {
      const {
        DENO_DIR: _denoDir,
        XDG_CACHE_HOME: _cacheHome,
        HOME: _home,
        ...rest
      } = host.environment();
      return rest;
    },
    spawn,
    workerStdio: () => {
      throw new Error("memoryRuntime: the parent side has no worker stdio");
    },
    writeStderr: (text) => host.writeStderr(text),
    exit: (code) => host.exit(code),
    onExit() {},
    pathIdentity: (path) => host.pathIdentity(path),
  };

  const before = replaceAdapter(parent);
  return {
    adapter: parent,
    children,
    live: () => [...live],
    failSpawns(count) {
      failures = count;
    },
    [Symbol.dispose]() {
      for (const child of [...live]) child.crash("SIGKILL");
      replaceAdapter(before);
    },
  };
}
