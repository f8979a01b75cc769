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
import {
  closeSync,
  existsSync,
  loadSpawnBuiltins,
  openSync,
  spawn,
} from "./node_builtins.ts";
import { nextTurn } from "./turns.ts";

const encoder = new TextEncoder();

/** Whether {@linkcode loadCommand} loaded `Deno.Command`. */
let commandLoaded = false;

/**
 * Loads `Deno.Command` (a lazy getter: its first read loads Deno's process
 * module), then gives the event loop a turn.
 */
async function loadCommand(): Promise<void> {
  if (commandLoaded) return;
  commandLoaded = typeof Deno.Command === "function";
  await nextTurn();
}

function spawnDeno(request: SpawnRequest): ChildHandle {
  const [program, ...args] = request.argv;
  if (program === undefined) throw new TypeError("Cannot spawn: empty argv");
  if (request.extraInput !== undefined) {
    return spawnWithInput(program, args, request, request.extraInput);
  }
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
      killGroup(pid, child, signal);
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

/** The parts of a `node:child_process` stream the handle below uses. */
interface NodeStream {
  on(event: string, listener: (...args: never[]) => void): unknown;
  pause(): unknown;
  resume(): unknown;
  destroy(): unknown;
  ref?(): unknown;
  unref?(): unknown;
}

/** A web stream over a `node:child_process` output, read as it is pulled. */
function webStream(readable: NodeStream): ReadableStream<Uint8Array> {
  let done = false;
  // Resumed only after a pause of ours: a resume() of a pipe not yet open
  // queues a listener each time (a MaxListeners warning on stderr).
  let paused = false;
  return new ReadableStream<Uint8Array>({
    start(controller) {
      readable.on("data", (chunk: Uint8Array) => {
        if (done) return;
        controller.enqueue(chunk);
        if ((controller.desiredSize ?? 1) <= 0) {
          paused = true;
          readable.pause();
        }
      });
      readable.on("end", () => {
        if (!done) (done = true, controller.close());
      });
      readable.on("close", () => {
        if (!done) (done = true, controller.close());
      });
      readable.on("error", (error: Error) => {
        if (!done) (done = true, controller.error(error));
      });
    },
    pull() {
      if (!paused) return;
      paused = false;
      readable.resume();
    },
    cancel() {
      done = true;
      readable.destroy();
    },
  });
}

/**
 * Why a spawn through `node:child_process` gave no pid (the program exists:
 * checked before; the cause itself is reported only a tick later): out of
 * descriptors when as many opens as the spawn's pipes take fail now, which
 * a pool waits out.
 */
function spawnFailure(program: string): Error {
  let code: string | undefined;
  const opened: number[] = [];
  try {
    // Four pipes, two descriptors each, and the one reporting exec errors.
    for (let i = 0; i < 9; i++) opened.push(openSync("/dev/null", "r"));
  } catch (error: unknown) {
    code = (error as { code?: string }).code;
  } finally {
    for (const fd of opened) closeSync(fd);
  }
  const exhausted = code === "EMFILE" || code === "ENFILE";
  return Object.assign(
    new Error(
      `Cannot spawn ${JSON.stringify(program)}${
        exhausted ? `: ${code}, too many open files` : ""
      }`,
    ),
    exhausted ? { code } : {},
  );
}

/** The shell {@linkcode spawnWithInput} starts the command through. */
const SHELL = "/bin/sh";

/** The variable that carries the command to that shell. */
const SPAWN_ARGV_ENV = "AIRLOCK_SPAWN_ARGV";

/** The shell's script: take the command, forget the variable, become the command. */
const SPAWN_SCRIPT =
  `c=$${SPAWN_ARGV_ENV}; unset ${SPAWN_ARGV_ENV}; eval "exec $c"`;

/** One argument, single-quoted for a POSIX shell. */
function shellQuote(arg: string): string {
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * Spawns through `node:child_process`, the one spawn API of Deno that opens
 * a descriptor past stderr (`Deno.Command` has none): for a child that reads
 * bytes on descriptor 3 (`SpawnRequest.extraInput`, the native confine
 * step). The handle behaves as `spawnDeno`'s.
 */
function spawnWithInput(
  program: string,
  args: readonly string[],
  request: SpawnRequest,
  extraInput: Uint8Array,
): ChildHandle {
  // The shell would start, then fail: say so here, as Deno.Command does.
  if (program.includes("/") && !existsSync(program)) {
    throw Object.assign(new Error(`Cannot spawn ${program}: ENOENT`), {
      code: "ENOENT",
    });
  }
  if (SPAWN_ARGV_ENV in request.env) {
    throw new RangeError(
      `Cannot spawn: the environment holds ${SPAWN_ARGV_ENV}`,
    );
  }
  // Deno's node:child_process rewrites arguments equal to Deno's own binary
  // (it inserts "run -A ..." as for a `node` command line). The command
  // reaches a shell in a variable instead, which it removes, then execs:
  // the spawned pid is the command's, and no argument is ever rewritten.
  const child = spawn(SHELL, ["-c", SPAWN_SCRIPT], {
    env: {
      ...request.env,
      [SPAWN_ARGV_ENV]: [program, ...args].map(shellQuote).join(" "),
    },
    cwd: request.cwd,
    stdio: ["pipe", "pipe", "pipe", "pipe"],
    detached: true,
  });
  // A spawn that fails is reported by an "error" event a tick later: heard
  // here, or it would be uncaught and end the parent (it did, out of
  // descriptors under a pool's burst).
  child.on("error", () => {});
  const pid = child.pid;
  if (pid === undefined) throw spawnFailure(program);
  const [stdin, stdout, stderr, extra] = child.stdio as unknown as [
    NodeStream & {
      write(chunk: Uint8Array, done: (error?: Error | null) => void): void;
      end(): void;
    },
    NodeStream,
    NodeStream,
    NodeStream & { end(bytes: Uint8Array): void },
  ];
  // A child gone early fails these pipes: its exit says why.
  for (const stream of [stdin, extra]) stream.on("error", () => {});
  // Written once and closed; never referenced again (a ref() or unref() of
  // a socket that is not open queues a "connect" listener each time).
  extra.end(extraInput);
  extra.on("finish", () => extra.destroy());
  const exited = new Promise<ExitStatus>((resolve) => {
    child.on(
      "exit",
      (code: number | null, signal: string | null) =>
        resolve({ code: signal ? null : code, signal: signal ?? null }),
    );
    child.on("error", () => resolve({ code: null, signal: null }));
  });
  let stdinOpen = true;
  void exited.then(() => {
    stdinOpen = false;
    stdin.destroy();
    extra.destroy();
  });
  let referenced = true;
  return {
    pid,
    stdout: webStream(stdout),
    stderr: webStream(stderr),
    exited,
    write: serialWriter((chunk) =>
      new Promise<void>((resolve, reject) => {
        if (!stdinOpen) {
          reject(new Error("Cannot write to worker: it has exited"));
          return;
        }
        stdin.write(chunk, (error) => error ? reject(error) : resolve());
      })
    ),
    closeStdin() {
      if (!stdinOpen) return;
      stdinOpen = false;
      stdin.end();
    },
    kill(signal) {
      killGroup(pid, child, signal);
    },
    setRef(ref) {
      if (ref === referenced) return;
      referenced = ref;
      for (const handle of [child, stdin, stdout, stderr]) {
        const target = handle as { ref?(): unknown; unref?(): unknown };
        if (ref) target.ref?.();
        else target.unref?.();
      }
    },
  };
}

/**
 * Chunks up to this size are written to stdout synchronously: an async
 * `Deno.stdout.write` runs on a blocking thread, a hand-off paid per frame,
 * and more for a frame larger than the pipe (64 KiB), whose answer reached
 * the parent only after the blocking thread had been woken again (issue 16;
 * docs/benchmarks.md, "Figures behind the code"). A chunk larger than the
 * pipe holds the event loop until
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
 * pulled `ReadableStream` (a cost a round trip of one call pays once per
 * call). Every chunk handed out is its own
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
  // A spawn with a fourth descriptor goes through node:child_process: its
  // first load and its sockets' (about 10 ms) each in a turn of its own.
  // Any other goes through Deno.Command, whose first use loads Deno's
  // process module (10 to 30 ms): in a turn before the spawn's.
  prepareSpawn(request) {
    return request.extraInput === undefined
      ? loadCommand()
      : loadSpawnBuiltins();
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

/**
 * Signals a worker's whole process group (it leads one), or the child
 * alone where the group is gone or cannot be signalled.
 */
function killGroup(
  pid: number,
  child: { kill(signal: "SIGTERM" | "SIGKILL"): unknown },
  signal: "SIGTERM" | "SIGKILL",
): void {
  try {
    Deno.kill(-pid, signal);
  } catch {
    try {
      child.kill(signal);
    } catch {
      // Already gone.
    }
  }
}
