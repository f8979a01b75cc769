/**
 * The Bun adapter: `Bun.spawn` for spawning, `Bun.stdin` / `Bun.stdout` for
 * serving. Bun's native members are typed here as local structural
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
  readonly pid: number;
  readonly stdin: BunFileSink;
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stderr: ReadableStream<Uint8Array>;
  readonly exited: Promise<number>;
  readonly exitCode: number | null;
  readonly signalCode: string | null;
  kill(signal?: string | number): void;
  ref(): void;
  unref(): void;
}

interface BunGlobal {
  readonly version: string;
  spawn(
    argv: string[],
    options: {
      env: Record<string, string>;
      cwd: string;
      stdin: "pipe";
      stdout: "pipe";
      stderr: "pipe";
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

function spawnBun(request: SpawnRequest): ChildHandle {
  const child = bun().spawn([...request.argv], {
    env: { ...request.env },
    cwd: request.cwd,
    stdin: "pipe",
    stdout: "pipe",
    stderr: "pipe",
    detached: true,
  });
  const pid = child.pid;
  const exited: Promise<ExitStatus> = child.exited.then(
    () => ({
      code: child.signalCode ? null : child.exitCode,
      signal: child.signalCode ?? null,
    }),
    () => ({ code: null, signal: null }),
  );
  let stdinOpen = true;
  let referenced = true;
  const write = sinkWriter(child.stdin);
  return {
    pid,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    write,
    closeStdin() {
      if (!stdinOpen) return;
      stdinOpen = false;
      try {
        const ended = child.stdin.end();
        if (ended instanceof Promise) ended.catch(() => {});
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
      if (ref === referenced) return;
      referenced = ref;
      if (ref) child.ref();
      else child.unref();
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
