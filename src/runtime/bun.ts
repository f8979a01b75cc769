/**
 * The Bun adapter: `node:child_process` for spawning (its pipes can be
 * unreferenced), `Bun.stdin` / `Bun.stdout` for serving. Bun's native members are typed here as local structural
 * declarations, so the rest of the code needs no ambient Bun types.
 *
 * @module
 */

import type {
  ChildHandle,
  ExitStatus,
  RuntimeAdapter,
  SpawnRequest,
  WorkerStdio,
} from "./types.ts";
import { serialWriter } from "./_write_queue.ts";

interface BunFileSink {
  write(chunk: Uint8Array): number;
  flush(): number | Promise<number>;
  end(): number | Promise<number>;
}

interface BunSubprocess {
  kill(signal?: string | number): void;
}

interface BunGlobal {
  readonly version: string;
  spawn(
    argv: string[],
    options: {
      env: Record<string, string>;
      cwd: string;
      stdin: "ignore";
      stdout: "ignore";
      stderr: "ignore";
      detached: boolean;
    },
  ): BunSubprocess;
  readonly stdin: { stream(): ReadableStream<Uint8Array> };
  readonly stdout: { writer(): BunFileSink };
}

function bun(): BunGlobal {
  return (globalThis as unknown as { Bun: BunGlobal }).Bun;
}

interface BunProcess {
  readonly execPath: string;
  readonly pid: number;
  readonly ppid: number;
  readonly argv: string[];
  readonly env: Record<string, string | undefined>;
  cwd(): string;
  exit(code: number): never;
  kill(pid: number, signal: string): void;
  on(event: "exit", listener: () => void): void;
}

/**
 * Bun's `process` global. Read only when running on Bun: this file is also
 * loaded on Deno, where a static `node:` import (or touching `process`)
 * starts Node compatibility, which costs ~15 ms of start and ~10 MiB.
 */
function proc(): BunProcess {
  return (globalThis as unknown as { process: BunProcess }).process;
}

/**
 * Bun's synchronous `node:fs` `writeSync`, loaded on first use: `node:fs`
 * costs a Bun process ~4 MiB of memory, so a worker that never reports on
 * stderr this way never loads it.
 */
function writeSync(fd: number, text: string): void {
  const meta = import.meta as unknown as {
    require(id: "node:fs"): { writeSync(fd: number, text: string): number };
  };
  meta.require("node:fs").writeSync(fd, text);
}

interface StatLike {
  dev: number;
  ino: number;
  birthtimeMs: number;
}

/** Bun's `node:fs` `statSync`, loaded on first use (parent side only). */
function statSync(
  path: string,
  options: { throwIfNoEntry: false },
): StatLike | undefined {
  const meta = import.meta as unknown as {
    require(id: "node:fs"): {
      statSync(
        path: string,
        options: { throwIfNoEntry: false },
      ): StatLike | undefined;
    };
  };
  return meta.require("node:fs").statSync(path, options);
}

/** Largest slice handed to a Bun file sink before flushing. */
const SLICE_BYTES = 1024 * 1024;

/**
 * Writes one chunk to a Bun file sink completely, slice by slice. A chunk
 * of one slice whose flush completes at once (the pipe had room) returns
 * nothing: no promise, no async function.
 */
function writeToSink(
  sink: BunFileSink,
  chunk: Uint8Array,
): Promise<void> | void {
  if (chunk.byteLength <= SLICE_BYTES) {
    sink.write(chunk);
    const flushed = sink.flush();
    if (typeof flushed === "number") return;
    return flushed.then(() => {});
  }
  return (async () => {
    for (let offset = 0; offset < chunk.byteLength; offset += SLICE_BYTES) {
      sink.write(chunk.subarray(offset, offset + SLICE_BYTES));
      await sink.flush();
    }
  })();
}

function sinkWriter(
  sink: BunFileSink,
): (chunks: readonly Uint8Array[]) => Promise<void> {
  return serialWriter((chunk) => writeToSink(sink, chunk));
}

/** The members of a Node `Readable` (a child's stdout or stderr) used here. */
interface NodeReadable {
  on(event: "data", listener: (chunk: Uint8Array) => void): void;
  once(event: "end", listener: () => void): void;
  once(event: "error", listener: (error: unknown) => void): void;
  pause(): void;
  resume(): void;
  destroy(): void;
  ref(): void;
  unref(): void;
}

/** The members of a Node `Writable` (a child's stdin) used here. */
interface NodeWritable {
  write(chunk: Uint8Array, callback: (error?: unknown) => void): boolean;
  end(): void;
  on(event: "error", listener: (error: unknown) => void): void;
  readonly destroyed: boolean;
  readonly writableEnded: boolean;
}

/** The members of a Node `ChildProcess` used here. */
interface NodeChildProcess {
  readonly pid: number | undefined;
  readonly stdin: NodeWritable;
  readonly stdout: NodeReadable;
  readonly stderr: NodeReadable;
  once(
    event: "exit",
    listener: (code: number | null, signal: string | null) => void,
  ): void;
  once(event: "error", listener: (error: unknown) => void): void;
  on(event: "error", listener: (error: unknown) => void): void;
  kill(signal: string): boolean;
  ref(): void;
  unref(): void;
}

interface NodeChildProcessModule {
  spawn(
    program: string,
    args: string[],
    options: {
      env: Record<string, string>;
      cwd: string;
      stdio: ["pipe", "pipe", "pipe"];
      detached: boolean;
    },
  ): NodeChildProcess;
}

/**
 * Bun's `node:child_process`, loaded on first spawn (parent side only).
 *
 * Children are spawned through it rather than `Bun.spawn` because its stdio
 * streams can be unreferenced: Bun keeps a pending read on a `Bun.spawn`
 * stream referenced even after `subprocess.unref()`, so a parent holding an
 * idle worker would never exit. Measured against `Bun.spawn` (alternating
 * runs of the benchmark's round-trip and 64-in-flight rows): the same CPU
 * per call on both sides, and the same throughput within noise.
 */
function childProcess(): NodeChildProcessModule {
  const meta = import.meta as unknown as {
    require(id: "node:child_process"): NodeChildProcessModule;
  };
  return meta.require("node:child_process");
}

/**
 * Bytes a child's stdout or stderr may hold unread before its source is
 * paused (the pipe then fills and the child's writes wait). Pausing and
 * resuming costs a few microseconds each, so it is not done per chunk.
 */
const STDOUT_QUEUE_BYTES = 1024 * 1024;

/**
 * A Node `Readable` as a Web stream. Chunks are handed on as they arrive
 * (each its own memory); the source pauses while STDOUT_QUEUE_BYTES wait
 * unread.
 */
function webStream(readable: NodeReadable): ReadableStream<Uint8Array> {
  let done = false;
  return new ReadableStream<Uint8Array>({
    start(controller) {
      readable.on("data", (chunk) => {
        if (done) return;
        controller.enqueue(chunk);
        if ((controller.desiredSize ?? 0) <= 0) readable.pause();
      });
      readable.once("end", () => {
        if (done) return;
        done = true;
        controller.close();
      });
      readable.once("error", (error) => {
        if (done) return;
        done = true;
        controller.error(error);
      });
    },
    pull() {
      readable.resume();
    },
    cancel() {
      done = true;
      readable.destroy();
    },
  }, {
    highWaterMark: STDOUT_QUEUE_BYTES,
    size: (chunk) => chunk.byteLength,
  });
}

/**
 * Writes one chunk to a child's stdin. Returns nothing when the stream took
 * it under its high-water mark; otherwise a promise that settles once the
 * chunk is written (rejecting when the pipe broke). A failure reported for
 * an earlier chunk fails every later write.
 */
function writeToStdin(
  stdin: NodeWritable,
  chunk: Uint8Array,
  state: { failure: unknown },
): Promise<void> | void {
  if (state.failure !== undefined) throw state.failure;
  if (stdin.destroyed || stdin.writableEnded) {
    throw state.failure = new Error("Cannot write to worker: stdin is closed");
  }
  let settle: ((error: unknown) => void) | undefined;
  const taken = stdin.write(chunk, (error) => {
    if (error) state.failure ??= error;
    settle?.(error);
  });
  if (taken) return;
  return new Promise<void>((resolve, reject) => {
    settle = (error) => error ? reject(error) : resolve();
  });
}

/**
 * Why a spawn that Bun's `node:child_process` refused failed. It reports
 * such failures (a missing or non-executable program, no free descriptors)
 * only through a later `error` event; the contract is a synchronous throw,
 * so the spawn is repeated with `Bun.spawn`, which throws the same error at
 * once. Should that one start (the program appeared meanwhile), it is
 * killed and a plain error says so.
 */
function spawnFailure(request: SpawnRequest): Error {
  try {
    const probe = bun().spawn([...request.argv], {
      env: { ...request.env },
      cwd: request.cwd,
      stdin: "ignore",
      stdout: "ignore",
      stderr: "ignore",
      detached: true,
    });
    probe.kill("SIGKILL");
  } catch (error: unknown) {
    return error instanceof Error ? error : new Error(String(error));
  }
  return new Error("the program could not be started");
}

function spawnBun(request: SpawnRequest): ChildHandle {
  const [program, ...args] = request.argv;
  if (program === undefined) throw new TypeError("Cannot spawn: empty argv");
  const child = childProcess().spawn(program, args, {
    env: { ...request.env },
    cwd: request.cwd,
    stdio: ["pipe", "pipe", "pipe"],
    detached: true,
  });
  // Errors arrive as events; the exit status and stdin writes report them.
  child.on("error", () => {});
  const pid = child.pid;
  if (pid === undefined) throw spawnFailure(request);
  const stdinState: { failure: unknown } = { failure: undefined };
  child.stdin.on("error", (error) => {
    stdinState.failure ??= error;
  });
  const exited = new Promise<ExitStatus>((resolve) => {
    child.once("exit", (code, signal) => {
      resolve({ code: signal ? null : code, signal: signal ?? null });
    });
  });
  let stdinOpen = true;
  let referenced = true;
  const stdin = child.stdin;
  const stdout = child.stdout;
  const stderr = child.stderr;
  return {
    pid,
    stdout: webStream(stdout),
    stderr: webStream(stderr),
    exited,
    write: serialWriter((chunk) => writeToStdin(stdin, chunk, stdinState)),
    closeStdin() {
      if (!stdinOpen) return;
      stdinOpen = false;
      try {
        stdin.end();
      } catch {
        // Already closed.
      }
    },
    kill(signal) {
      try {
        proc().kill(-pid, signal);
      } catch {
        try {
          child.kill(signal);
        } catch {
          // Already gone.
        }
      }
    },
    setRef(ref) {
      // Called on every send and answer: only a change reaches the runtime.
      // The process and both read pipes each hold the event loop.
      if (ref === referenced) return;
      referenced = ref;
      if (ref) {
        child.ref();
        stdout.ref();
        stderr.ref();
      } else {
        child.unref();
        stdout.unref();
        stderr.unref();
      }
    },
  };
}

function workerStdio(): WorkerStdio {
  return {
    input: bun().stdin.stream(),
    write: sinkWriter(bun().stdout.writer()),
  };
}

/** Runs airlock on Bun. */
export const bunAdapter: RuntimeAdapter = {
  name: "bun",
  get version(): string {
    return bun().version;
  },
  execPath: () => proc().execPath,
  pid: () => proc().pid,
  args: () => proc().argv.slice(2),
  ppid: () => proc().ppid,
  cwd: () => proc().cwd(),
  env: (name) => proc().env[name],
  environment() {
    const env: Record<string, string> = {};
    for (const [name, value] of Object.entries(proc().env)) {
      if (value !== undefined) env[name] = value;
    }
    return env;
  },
  spawn: spawnBun,
  workerStdio,
  writeStderr(text) {
    try {
      writeSync(2, text);
    } catch {
      // stderr closed: nowhere left to report.
    }
  },
  exit: (code) => proc().exit(code),
  onExit(callback) {
    proc().on("exit", callback);
  },
  pathIdentity(path) {
    try {
      const stat = statSync(path, { throwIfNoEntry: false });
      return stat ? `${stat.dev}:${stat.ino}:${stat.birthtimeMs}` : "-";
    } catch {
      return "?";
    }
  },
};
