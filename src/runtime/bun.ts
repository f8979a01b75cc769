/**
 * The Bun adapter: `Bun.spawn` for spawning, `Bun.stdin` / `Bun.stdout` for
 * serving. Bun's native members are typed here as local structural
 * declarations, so the rest of the code needs no ambient Bun types.
 *
 * @module
 */

import { writeSync } from "node:fs";
import process from "node:process";
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

/** Largest slice handed to a Bun file sink before flushing. */
const SLICE_BYTES = 1024 * 1024;

function sinkWriter(
  sink: BunFileSink,
): (chunks: readonly Uint8Array[]) => Promise<void> {
  return serialWriter(async (chunk) => {
    for (let offset = 0; offset < chunk.byteLength; offset += SLICE_BYTES) {
      sink.write(
        chunk.byteLength <= SLICE_BYTES
          ? chunk
          : chunk.subarray(offset, offset + SLICE_BYTES),
      );
      await sink.flush();
    }
  });
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
        process.kill(-pid, signal);
      } catch {
        try {
          child.kill(signal);
        } catch {
          // Already gone.
        }
      }
    },
    setRef(ref) {
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
  execPath: () => process.execPath,
  pid: () => process.pid,
  args: () => process.argv.slice(2),
  ppid: () => process.ppid,
  cwd: () => process.cwd(),
  env: (name) => process.env[name],
  environment() {
    const env: Record<string, string> = {};
    for (const [name, value] of Object.entries(process.env)) {
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
  exit: (code) => process.exit(code),
  onExit(callback) {
    process.on("exit", callback);
  },
  signal(pid, signal) {
    try {
      process.kill(pid, signal);
      return true;
    } catch {
      return false;
    }
  },
};
