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
      if (ref) child.ref();
      else child.unref();
    },
  };
}

function workerStdio(): WorkerStdio {
  const stdout = Deno.stdout;
  return {
    input: Deno.stdin.readable,
    write: serialWriter(async (chunk) => {
      let offset = 0;
      while (offset < chunk.byteLength) {
        offset += await stdout.write(
          offset === 0 ? chunk : chunk.subarray(offset),
        );
      }
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
  signal(pid, signal) {
    try {
      Deno.kill(pid, signal);
      return true;
    } catch {
      return false;
    }
  },
};
