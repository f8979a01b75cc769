/**
 * The Deno adapter: `Deno.Command` for spawning, `Deno.stdin` / `Deno.stdout`
 * for serving.
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
import { COPY_READ_BYTES, READ_BYTES } from "./chunk_reader.ts";

const encoder = new TextEncoder();

function spawnDeno(request: SpawnRequest): ChildHandle {
  const [program, ...args] = request.argv;
  if (program === undefined) throw new TypeError("Cannot spawn: empty argv");
  const child = new Deno.Command(program, {
    args,
    env: { ...request.env },
    clearEnv: true,
    cwd: request.cwd,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    detached: true,
  }).spawn();
  const pid = child.pid;
  const writer = child.stdin.getWriter();
  // A write to a dead child rejects; the caller learns of it through exited.
  writer.closed.catch(() => {});
  const exited: Promise<ExitStatus> = child.status.then(
    (status) => ({
      code: status.signal ? null : status.code,
      signal: status.signal ?? null,
    }),
    () => ({ code: null, signal: null }),
  );
  let stdinOpen = true;
  let referenced = true;
  // Release the stdin pipe as soon as the child is gone, not at the next
  // garbage collection (a pool recycling workers would pile up fds).
  child.status.finally(() => {
    stdinOpen = false;
    writer.abort(new Error("Cannot write to worker: it has exited"))
      .catch(() => {});
  });
  return {
    pid,
    stdout: child.stdout,
    stderr: child.stderr,
    exited,
    write: serialWriter((chunk) => writer.write(chunk)),
    closeStdin() {
      if (!stdinOpen) return;
      stdinOpen = false;
      writer.close().catch(() => {});
    },
    kill(signal) {
      try {
        Deno.kill(-pid, signal);
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
      try {
        if (ref) child.ref();
        else child.unref();
      } catch {
        // Reaped, and `status` not settled yet: Deno throws BadResource.
        // Nothing is left to keep alive.
      }
    },
  };
}

/**
 * Chunks up to this size are written to stdout synchronously: an async
 * `Deno.stdout.write` runs on a blocking thread, and that hand-off cost
 * ~35 µs per frame (see docs/benchmarks.md), more for a frame larger than
 * the pipe (64 KiB), whose answer reached the parent only after the blocking
 * thread had been woken again (issue 16: a 71 KB answer arrived 0.15 to 2 ms
 * later under load). A chunk larger than the pipe holds the event loop until
 * the parent has read all but its last pipe-full: the parent reads stdout
 * all the time, and the parent-death watchdog runs on a thread of its own,
 * but a concurrent worker's other handlers wait meanwhile, so only chunks up
 * to 256 KiB (the loop held for at most the parent reading 192 KiB) are
 * written so; larger ones (big binary values) keep the async path.
 */
const SYNC_WRITE_BYTES = 256 * 1024;

/**
 * Stdin as chunks, read with `Deno.stdin.read` by a plain async iterator:
 * cheaper per chunk than `Deno.stdin.readable`'s byte stream, and than a
 * pulled `ReadableStream` (~0.8-1.2 µs less per chunk on Deno, which a round
 * trip of one call pays once per call). Every chunk handed out is its own
 * memory, never written again (the frame reader keeps views on it).
 */
function stdinChunks(): AsyncIterable<Uint8Array> {
  const stdin = Deno.stdin;
  let buffer = new Uint8Array(READ_BYTES);
  const end: IteratorResult<Uint8Array> = { done: true, value: undefined };
  const chunk = (read: number | null): IteratorResult<Uint8Array> => {
    if (read === null) return end;
    if (read <= COPY_READ_BYTES) {
      return { done: false, value: buffer.slice(0, read) };
    }
    const value = buffer.subarray(0, read);
    buffer = new Uint8Array(READ_BYTES);
    return { done: false, value };
  };
  return {
    [Symbol.asyncIterator]: () => ({
      next: () => stdin.read(buffer).then(chunk),
    }),
  };
}

function workerStdio(): WorkerStdio {
  const stdout = Deno.stdout;
  return {
    input: stdinChunks(),
    write: serialWriter((chunk) => {
      let offset = 0;
      if (chunk.byteLength <= SYNC_WRITE_BYTES) {
        try {
          while (offset < chunk.byteLength) {
            offset += stdout.writeSync(
              offset === 0 ? chunk : chunk.subarray(offset),
            );
          }
          return;
        } catch (error: unknown) {
          // A non-blocking stdout that is full: finish asynchronously.
          if (!(error instanceof Deno.errors.WouldBlock)) throw error;
        }
      }
      return (async () => {
        while (offset < chunk.byteLength) {
          offset += await stdout.write(
            offset === 0 ? chunk : chunk.subarray(offset),
          );
        }
      })();
    }),
  };
}

/** Runs airlock on Deno. */
export const denoAdapter: RuntimeAdapter = {
  name: "deno",
  get version(): string {
    return Deno.version.deno;
  },
  execPath: () => Deno.execPath(),
  pid: () => Deno.pid,
  args: () => [...Deno.args],
  ppid: () => Deno.ppid,
  cwd: () => Deno.cwd(),
  env(name) {
    try {
      return Deno.env.get(name);
    } catch {
      return undefined;
    }
  },
  environment() {
    try {
      return Deno.env.toObject();
    } catch {
      return {};
    }
  },
  spawn: spawnDeno,
  workerStdio,
  writeStderr(text) {
    const bytes = encoder.encode(text);
    let offset = 0;
    try {
      while (offset < bytes.byteLength) {
        offset += Deno.stderr.writeSync(bytes.subarray(offset));
      }
    } catch {
      // stderr closed: nowhere left to report.
    }
  },
  exit: (code) => Deno.exit(code),
  onExit(callback) {
    globalThis.addEventListener("unload", callback);
  },
  pathIdentity(path) {
    // Deno.statSync is about 3.5 times cheaper than node:fs statSync here.
    try {
      const stat = Deno.statSync(path);
      return `${stat.dev}:${stat.ino}:${stat.birthtime?.getTime()}`;
    } catch (error: unknown) {
      return error instanceof Deno.errors.NotFound ? "-" : "?";
    }
  },
};
