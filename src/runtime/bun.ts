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
  /** Every descriptor; those past stderr are numbers (`"pipe"`: the parent's end). */
  readonly stdio: readonly unknown[];
}

interface BunGlobal {
  readonly version: string;
  spawn(
    argv: string[],
    options: {
      env: Record<string, string>;
      cwd: string;
      stdio: ["pipe", "pipe", "pipe", ...("pipe")[]];
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
 * starts Node compatibility (a cost in start time and memory).
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

/**
 * Whether a child's pipes may be read: while it is referenced (a call in
 * flight, a start, a shutdown), and always once it has exited.
 *
 * Bun keeps its event loop alive while a read of a `Bun.spawn` pipe is
 * pending, even after `subprocess.unref()`; only releasing the reader lets a
 * program whose workers are idle end. So an unreferenced child's pipes are
 * not read: their readers are released (a pending read rejects, and what it
 * would have read stays queued in the stream), and reading resumes when the
 * child is referenced again or exits. A worker that writes more than the
 * pipe holds while idle waits until then.
 */
interface ReadGate {
  /** Whether reads may be pending. */
  readonly open: boolean;
  /** Settles when the gate is next open (at once if it is). */
  opened(): Promise<void>;
  /** Called when the gate closes: each stream releases its reader. */
  readonly onClose: Set<() => void>;
}

/** A gate with the controls its owner needs. */
interface ReadGateControl extends ReadGate {
  /** Opens or closes the gate. */
  set(open: boolean): void;
}

function readGate(): ReadGateControl {
  let open = true;
  let waiters: (() => void)[] = [];
  const onClose = new Set<() => void>();
  return {
    get open(): boolean {
      return open;
    },
    opened(): Promise<void> {
      if (open) return Promise.resolve();
      return new Promise<void>((resolve) => waiters.push(resolve));
    },
    onClose,
    set(next: boolean): void {
      if (next === open) return;
      open = next;
      if (open) {
        const ready = waiters;
        waiters = [];
        for (const resolve of ready) resolve();
      } else {
        for (const release of onClose) release();
      }
    },
  };
}

/**
 * A child's pipe, read through `gate`: the native stream is read only while
 * the gate is open. Every chunk is handed on as the native stream gave it.
 *
 * `getReader()` returns a reader over the native stream itself (one promise
 * per chunk, as the native reader), which is how the parent reads a worker's
 * stdout; other ways of reading (iteration, `pipeTo`) go through the stream's
 * own queue.
 *
 * The class is made on first use: evaluating `extends ReadableStream` makes
 * Deno load its web streams (a part of a Deno program's start), and
 * importing airlock on Deno never needs this Bun-only class.
 */
function gatedStreamClass() {
  return class GatedStream extends ReadableStream<Uint8Array> {
    readonly #native: ReadableStream<Uint8Array>;
    readonly #gate: ReadGate;
    #reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    #cancelled = false;
    #locked = false;

    constructor(native: ReadableStream<Uint8Array>, gate: ReadGate) {
      // The source's callbacks run after construction, when `self` is set.
      const box: { self?: GatedStream } = {};
      super({
        pull: (controller) =>
          (box.self as GatedStream).#read().then((result) => {
            if (result.done) controller.close();
            else controller.enqueue(result.value);
          }, (error: unknown) => controller.error(error)),
        cancel: (reason) => (box.self as GatedStream).#cancel(reason),
      }, { highWaterMark: 0 });
      box.self = this;
      this.#native = native;
      this.#gate = gate;
      gate.onClose.add(this.#release);
    }

    /** Releases the native reader (the gate closed): a pending read rejects. */
    #release = (): void => {
      const current = this.#reader;
      this.#reader = undefined;
      current?.releaseLock();
    };

    #read(): Promise<ReadableStreamReadResult<Uint8Array>> {
      if (this.#cancelled) {
        return Promise.resolve(
          { done: true } as ReadableStreamReadResult<Uint8Array>,
        );
      }
      if (!this.#gate.open) return this.#gate.opened().then(() => this.#read());
      const current = this.#reader ??= this.#native.getReader();
      return current.read().then((result) => {
        if (result.done) {
          this.#gate.onClose.delete(this.#release);
          this.#ended.resolve(undefined);
        }
        return result;
      }, (error: unknown) => {
        // Released by the gate: read again once it opens.
        if (current !== this.#reader && !this.#cancelled) return this.#read();
        this.#gate.onClose.delete(this.#release);
        this.#ended.reject(error);
        throw error;
      });
    }

    /** Settles when the pipe ends (or is cancelled), rejects when it fails. */
    readonly #ended: PromiseWithResolvers<undefined> = (() => {
      const ended = Promise.withResolvers<undefined>();
      ended.promise.catch(() => {});
      return ended;
    })();

    #cancel(reason: unknown): Promise<void> {
      this.#cancelled = true;
      this.#ended.resolve(undefined);
      this.#gate.onClose.delete(this.#release);
      const current = this.#reader;
      this.#reader = undefined;
      return current ? current.cancel(reason) : this.#native.cancel(reason);
    }

    /**
     * A reader over the native pipe (not a byte stream: a BYOB reader is
     * refused, as for any default stream).
     */
    // The overloads of getReader() cannot be restated for an override.
    // deno-lint-ignore no-explicit-any
    override getReader(options?: { mode?: string }): any {
      if (options?.mode === "byob") {
        throw new TypeError("Cannot read a child's pipe with a BYOB reader");
      }
      if (this.#locked) throw new TypeError("The stream is locked");
      this.#locked = true;
      const reader: ReadableStreamDefaultReader<Uint8Array> = {
        read: () => this.#read(),
        cancel: (reason?: unknown) => this.#cancel(reason),
        releaseLock: () => {
          this.#locked = false;
        },
        closed: this.#ended.promise,
      };
      return reader;
    }
  };
}

type GatedStreamClass = ReturnType<typeof gatedStreamClass>;
let GatedStream: GatedStreamClass | undefined;

/** A `GatedStream` over `native` (the class made on first use). */
function gatedStream(
  native: ReadableStream<Uint8Array>,
  gate: ReadGate,
): ReadableStream<Uint8Array> {
  GatedStream ??= gatedStreamClass();
  return new GatedStream(native, gate);
}

/**
 * Writes the bytes of a spawn's descriptor 3 to the parent's end and closes
 * it (`SpawnRequest.extraInput`: a few KiB, within the socket's buffer, so
 * the write does not wait on the child). A child gone before reading them
 * fails its start on its own.
 */
function writeExtraInput(fd: unknown, bytes: Uint8Array): void {
  const meta = import.meta as unknown as {
    require(id: "node:fs"): {
      writeSync(fd: number, bytes: Uint8Array, offset: number): number;
      closeSync(fd: number): void;
    };
  };
  if (typeof fd !== "number") return;
  const fs = meta.require("node:fs");
  try {
    let offset = 0;
    while (offset < bytes.byteLength) {
      offset += fs.writeSync(fd, bytes, offset);
    }
  } catch {
    // The child closed it: its start fails and says why.
  } finally {
    fs.closeSync(fd);
  }
}

function spawnBun(request: SpawnRequest): ChildHandle {
  const extra = request.extraInput;
  const child = bun().spawn([...request.argv], {
    env: { ...request.env },
    cwd: request.cwd,
    stdio: extra === undefined
      ? ["pipe", "pipe", "pipe"]
      : ["pipe", "pipe", "pipe", "pipe"],
    detached: true,
  });
  if (extra !== undefined) writeExtraInput(child.stdio[3], extra);
  const pid = child.pid;
  const gate = readGate();
  let gone = false;
  const exited: Promise<ExitStatus> = child.exited.then(
    () => ({
      code: child.signalCode ? null : child.exitCode,
      signal: child.signalCode ?? null,
    }),
    () => ({ code: null, signal: null }),
  ).then((status) => {
    // What it wrote before exiting is read to the end, referenced or not.
    gone = true;
    gate.set(true);
    return status;
  });
  let stdinOpen = true;
  let referenced = true;
  /** Whether an unreference waits for the end of the turn. */
  let unrefDue = false;
  const unrefNow = (): void => {
    if (!unrefDue) return;
    unrefDue = false;
    referenced = false;
    child.unref();
    if (!gone) gate.set(false);
  };
  const write = sinkWriter(child.stdin);
  return {
    pid,
    stdout: gatedStream(child.stdout, gate),
    stderr: gatedStream(child.stderr, gate),
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
      if (ref) {
        unrefDue = false;
        if (referenced) return;
        referenced = true;
        child.ref();
        if (!gone) gate.set(true);
        return;
      }
      if (!referenced || unrefDue) return;
      // Once this turn is over, if no call came meanwhile: calls one after
      // another (an answer, then the next call in the same turn) would
      // otherwise release and take the pipes' readers again on every call.
      unrefDue = true;
      setImmediate(unrefNow);
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
