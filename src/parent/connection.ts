/**
 * One live worker process: spawn, ready handshake, request-id routing,
 * per-call deadlines, cancel with a grace period, stderr tail, and exit
 * diagnostics. Sessions, one-shot calls and pools are built from these.
 *
 * @module
 */

import {
  ProtocolError,
  RemoteError,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../errors.ts";
import { FrameReader } from "../protocol/frame.ts";
import {
  CONTROL_ID,
  decodeMessage,
  encodeMessage,
  type HelloMessage,
  type WorkerMessage,
} from "../protocol/messages.ts";
import type { ChildHandle, RuntimeAdapter } from "../runtime/types.ts";
import type { WorkerCommand } from "../runtime/worker_command.ts";
import { readRssBytes } from "../runtime/proc.ts";

/** Bytes of stderr (and stray stdout) kept for crash reports. */
export const STDERR_TAIL_BYTES = 8 * 1024;
/** How long to keep reading stdout after the process exited. */
const DRAIN_AFTER_EXIT_MS = 1_000;

/** Where a worker's log lines go. */
export type LogSink = (line: string, source: LogSource) => void;

/** Who wrote a log line. */
export interface LogSource {
  /** The worker module (or command). */
  module: string;
  /** The worker's pid. */
  pid: number;
  /** `"stderr"`, or `"stdout"` for stray bytes on the frame stream. */
  stream: "stderr" | "stdout";
}

/** One call on its way through a connection. Owned by a session or pool. */
export interface CallRecord {
  /** The request id (unique per parent process, so a retry may keep it). */
  readonly id: number;
  /** The op. */
  readonly op: string;
  /** The encoded frame. */
  readonly chunks: Uint8Array[];
  /** Deadline once written, in ms; 0 for none. */
  readonly timeoutMs: number;
  /** Whether the op may run twice. */
  readonly idempotent: boolean;
  /** Times it has been handed to a worker. */
  attempts: number;
  /** Whether it has ever been (or started to be) written to a worker. */
  written: boolean;
  /** Whether its promise has settled. */
  settled: boolean;
  /** Settles the call. */
  resolve(value: unknown): void;
  /** Settles the call. */
  reject(error: unknown): void;
}

/** When a call written to the worker times out. */
interface Deadline {
  /** The call. */
  call: CallRecord;
  /** When it was written (ms since the epoch). */
  startedAt: number;
  /** When it times out (ms since the epoch). */
  at: number;
}

/** How a connection ended. */
export interface ConnectionExit {
  /** The exit code, or `null` when a signal ended it. */
  code: number | null;
  /** The signal name, or `null`. */
  signal: string | null;
  /** Why airlock stopped it, if it did. */
  reason: string | undefined;
  /** Whether the exit was asked for (close, restart, recycle). */
  requested: boolean;
  /** The tail of stderr. */
  stderrTail: string;
  /** The worker's pid. */
  pid: number;
  /** A protocol violation that ended it, if any. */
  protocolError: ProtocolError | undefined;
}

/** What a connection tells its owner. */
export interface ConnectionEvents {
  /** Calls that were in flight when the process went away, not yet settled. */
  onLost(calls: CallRecord[], exit: ConnectionExit): void;
  /** A call passed its deadline and was rejected. */
  onTimeout(call: CallRecord): void;
  /** A call was answered. */
  onAnswer(call: CallRecord): void;
  /** The worker finished something it was running (occupancy went down). */
  onSlotFree?(): void;
}

/** Options of {@linkcode startConnection}. */
export interface ConnectionOptions {
  /** The runtime adapter that spawns. */
  adapter: RuntimeAdapter;
  /** What to run. */
  command: WorkerCommand;
  /** Largest frame accepted from the worker. */
  maxFrameBytes: number;
  /** Deadline for the ready handshake, in ms; 0 for none. */
  startTimeoutMs: number;
  /** How long a cancelled call may keep running before the worker is killed. */
  cancelGraceMs: number;
  /** Where log lines go. */
  onLog: LogSink;
  /** Events for the owner. */
  events: ConnectionEvents;
}

const live = new Set<ChildHandle>();
const exitHooks = new WeakSet<RuntimeAdapter>();

function reapOnExit(adapter: RuntimeAdapter): void {
  if (exitHooks.has(adapter)) return;
  exitHooks.add(adapter);
  adapter.onExit(() => {
    for (const child of live) child.kill("SIGKILL");
  });
}

function timeoutReason(call: CallRecord): string {
  return `killed by airlock because call "${call.op}" (id ${call.id}) timed out twice in a row`;
}

/** Bytes asked of each read of a worker's stdout. */
const READ_BYTES = 64 * 1024;
/** Reads of at most this many bytes are copied out and the buffer reused. */
const COPY_READ_BYTES = 4 * 1024;

/** Reads a stream chunk by chunk; `undefined` at its end. */
interface ChunkReader {
  read(): Promise<Uint8Array | undefined>;
  cancel(): Promise<void>;
}

/**
 * Reads a worker's stdout. Where the stream is a byte stream (Deno), reads
 * go into one reused buffer, and a small read is copied out: a plain reader
 * would allocate (and zero) a fresh 64 KiB buffer for every read, which a
 * round trip of a few dozen bytes pays for in time and garbage. Every chunk
 * handed out is its own memory, never written again (frames keep views on
 * it).
 */
function stdoutReader(stream: ReadableStream<Uint8Array>): ChunkReader {
  let byob: ReadableStreamBYOBReader;
  try {
    byob = stream.getReader({ mode: "byob" });
  } catch {
    const reader = stream.getReader();
    return {
      read: () => reader.read().then((result) => result.value),
      cancel: () => reader.cancel(),
    };
  }
  let buffer = new ArrayBuffer(READ_BYTES);
  return {
    async read() {
      const { value, done } = await byob.read(new Uint8Array(buffer));
      if (done || value === undefined) return undefined;
      if (value.byteLength <= COPY_READ_BYTES) {
        buffer = value.buffer;
        return value.slice();
      }
      buffer = new ArrayBuffer(READ_BYTES);
      return value;
    },
    cancel: () => byob.cancel(),
  };
}

/** A live worker process. Create with {@linkcode startConnection}. */
export class Connection {
  /** The worker module (or command), for messages. */
  readonly module: string;
  /** The pid airlock spawned (a sandbox's or launcher's pid when wrapped). */
  readonly spawnPid: number;
  /** When the process was spawned (ms since the epoch). */
  readonly startedAt: number;
  /** Settles with the hello once ready; rejects with a start error. */
  readonly ready: Promise<HelloMessage>;
  /** Settles once the process is gone and its output is drained. */
  readonly closed: Promise<ConnectionExit>;

  #options: ConnectionOptions;
  #child: ChildHandle;
  #hello: HelloMessage | undefined;
  #pending = new Map<number, CallRecord>();
  /**
   * Deadlines of the calls written, by id. One shared, unref'd timer serves
   * them all, armed for the earliest: a timer per call cost ~1.6 µs of CPU
   * per call on Deno (a quarter of the parent's work at 64 calls in flight).
   * While calls are pending the child is ref'd, so the timer fires on time.
   */
  #timers = new Map<number, Deadline>();
  #deadlineTimer: ReturnType<typeof setTimeout> | undefined;
  #deadlineAt = Infinity;
  #cancelling = new Map<number, ReturnType<typeof setTimeout>>();
  #tail = "";
  #killReason: string | undefined;
  #requested = false;
  #protocolError: ProtocolError | undefined;
  #exit: ConnectionExit | undefined;
  #resolveReady!: (hello: HelloMessage) => void;
  #rejectReady!: (error: Error) => void;
  #fatal: { phase: "import" | "definition"; error: Error } | undefined;
  #truncated: { expectedBytes: number; receivedBytes: number } | undefined;
  #consecutiveTimeouts = 0;

  /** @internal Use {@linkcode startConnection}. */
  constructor(options: ConnectionOptions, child: ChildHandle) {
    this.#options = options;
    this.#child = child;
    this.module = options.command.module;
    this.spawnPid = child.pid;
    this.startedAt = Date.now();
    this.ready = new Promise<HelloMessage>((resolve, reject) => {
      this.#resolveReady = resolve;
      this.#rejectReady = reject;
    });
    this.ready.catch(() => {});
    live.add(child);
    reapOnExit(options.adapter);
    const stdoutDone = this.#pumpStdout();
    const stderrDone = this.#pumpStderr();
    this.closed = this.#watchExit(stdoutDone, stderrDone);
    if (options.startTimeoutMs > 0) {
      const timer = setTimeout(() => {
        if (this.#hello || this.#exit) return;
        const error = new WorkerTimeoutError({
          module: this.module,
          pid: this.spawnPid,
          timeoutMs: options.startTimeoutMs,
          elapsedMs: Date.now() - this.startedAt,
          phase: "start",
        });
        this.#rejectReady(error);
        this.kill("not ready before startTimeoutMs");
      }, options.startTimeoutMs);
      this.ready.then(() => clearTimeout(timer), () => clearTimeout(timer));
    }
  }

  /** The worker's pid: from its hello once ready (the real worker inside any sandbox). */
  get pid(): number {
    return this.#hello?.pid ?? this.spawnPid;
  }

  /** The hello, once ready. */
  get hello(): HelloMessage | undefined {
    return this.#hello;
  }

  /** Calls written and not yet answered. */
  get inFlight(): number {
    return this.#pending.size;
  }

  /** Whether the process is still running (as far as airlock knows). */
  get alive(): boolean {
    return this.#exit === undefined && this.#killReason === undefined &&
      !this.#protocolError;
  }

  /** Whether a shutdown, kill or exit has begun. */
  get stopping(): boolean {
    return this.#requested || this.#killReason !== undefined ||
      this.#exit !== undefined || this.#protocolError !== undefined;
  }

  /** The tail of the worker's stderr. */
  get stderrTail(): string {
    return this.#tail;
  }

  /** Calls that timed out in a row without an answer in between. */
  get consecutiveTimeouts(): number {
    return this.#consecutiveTimeouts;
  }

  /** Resident memory of the worker process in bytes, when it can be read. */
  rssBytes(): number | undefined {
    if (!this.#options.command.local) return undefined;
    return readRssBytes(this.pid);
  }

  /**
   * Writes a call to the worker. Its promise settles through the record.
   *
   * @param call The call.
   */
  send(call: CallRecord): void {
    call.attempts++;
    call.written = true;
    this.#pending.set(call.id, call);
    this.#syncRef();
    if (call.timeoutMs > 0) {
      // The deadline counts from when the call is written. Until the write
      // completes it also counts from now, so a worker that stopped reading
      // its stdin (a full pipe) cannot hold the call forever.
      const startedAt = Date.now();
      const at = startedAt + call.timeoutMs;
      this.#timers.set(call.id, { call, startedAt, at });
      if (at < this.#deadlineAt) this.#armDeadline(at);
    }
    this.#child.write(call.chunks).then(() => {
      const deadline = this.#timers.get(call.id);
      if (deadline && deadline.call === call) {
        deadline.startedAt = Date.now();
        deadline.at = deadline.startedAt + call.timeoutMs;
      }
    }, () => {
      // The pipe broke: the exit handler reports the call as lost.
    });
  }

  #armDeadline(at: number): void {
    if (this.#deadlineTimer !== undefined) clearTimeout(this.#deadlineTimer);
    this.#deadlineAt = at;
    const timer = setTimeout(
      () => this.#onDeadline(),
      Math.max(0, at - Date.now()),
    );
    (timer as { unref?: () => void }).unref?.();
    this.#deadlineTimer = timer;
  }

  #onDeadline(): void {
    this.#deadlineTimer = undefined;
    this.#deadlineAt = Infinity;
    const now = Date.now();
    const due: Deadline[] = [];
    let next = Infinity;
    for (const deadline of this.#timers.values()) {
      if (deadline.at <= now) due.push(deadline);
      else if (deadline.at < next) next = deadline.at;
    }
    due.sort((a, b) => a.at - b.at);
    for (const deadline of due) {
      this.#timeout(deadline.call, deadline.startedAt);
    }
    if (next < this.#deadlineAt && this.#exit === undefined) {
      this.#armDeadline(next);
    }
  }

  #timeout(call: CallRecord, startedAt: number): void {
    this.#timers.delete(call.id);
    if (this.#pending.get(call.id) !== call) return;
    this.#consecutiveTimeouts++;
    this.#abandon(
      call,
      new WorkerTimeoutError({
        module: this.module,
        op: call.op,
        pid: this.pid,
        timeoutMs: call.timeoutMs,
        elapsedMs: Date.now() - startedAt,
        phase: "call",
      }),
      "timed out",
    );
    if (this.#consecutiveTimeouts >= 2) this.kill(timeoutReason(call));
    this.#options.events.onTimeout(call);
  }

  /**
   * Abandons a call in flight: rejects it with `reason`, tells the worker to
   * abort it, and kills the worker if the handler has not finished after the
   * grace period (`cancelGraceMs`).
   *
   * @param call The call.
   * @param reason What the call rejects with.
   * @returns Whether the call was in flight here.
   */
  cancel(call: CallRecord, reason: unknown): boolean {
    if (this.#pending.get(call.id) !== call) return false;
    this.#abandon(call, reason, "cancelled");
    return true;
  }

  #abandon(call: CallRecord, reason: unknown, what: string): void {
    this.#pending.delete(call.id);
    this.#clearTimer(call.id);
    const grace = this.#options.cancelGraceMs;
    this.#cancelling.set(
      call.id,
      setTimeout(() => {
        this.#cancelling.delete(call.id);
        this.kill(
          `killed by airlock because ${what} call "${call.op}" (id ${call.id}) did not stop within ${grace} ms`,
        );
      }, grace),
    );
    this.#syncRef();
    call.reject(reason);
    this.#writeCancel(call.id);
  }

  /** Calls the worker is still running: in flight plus abandoned ones that have not stopped. */
  get occupancy(): number {
    return this.#pending.size + this.#cancelling.size;
  }

  #writeCancel(id: number): void {
    if (this.#exit) return;
    this.#child.write(encodeMessage({ type: "cancel", id })).catch(() => {});
  }

  #clearTimer(id: number): void {
    // The shared timer stays armed; when it fires it finds nothing due.
    this.#timers.delete(id);
  }

  /**
   * Settles once no call is in flight here.
   *
   * @returns A promise.
   */
  idle(): Promise<void> {
    if (this.#pending.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
  }

  #idleWaiters: (() => void)[] = [];

  #lastOccupancy = 0;

  #syncRef(): void {
    const occupancy = this.occupancy;
    const freed = occupancy < this.#lastOccupancy;
    this.#lastOccupancy = occupancy;
    if (freed) queueMicrotask(() => this.#options.events.onSlotFree?.());
    if (this.#pending.size === 0 && this.#idleWaiters.length > 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
    if (this.#exit) return;
    this.#child.setRef(
      this.#pending.size > 0 || this.#cancelling.size > 0 || !this.#hello ||
        this.#requested || this.#killReason !== undefined,
    );
  }

  /**
   * Kills the process (its process group) at once.
   *
   * @param reason Why, for the crash report of the calls it was running.
   * @param requested Whether the owner asked for this exit (no crash to report).
   */
  kill(reason: string, requested = false): void {
    if (this.#exit) return;
    if (requested) this.#requested = true;
    this.#killReason ??= reason;
    this.#syncRef();
    this.#child.kill("SIGKILL");
  }

  /**
   * Asks the worker to finish what it is running and exit; escalates to
   * SIGTERM and then SIGKILL if it does not exit within `graceMs` each.
   *
   * @param graceMs How long each step may take.
   * @returns How it ended.
   */
  async shutdown(graceMs: number): Promise<ConnectionExit> {
    if (this.#exit) return this.#exit;
    this.#requested = true;
    this.#syncRef();
    if (this.#hello && !this.#protocolError) {
      this.#child.write(encodeMessage({ type: "shutdown", id: CONTROL_ID }))
        .catch(() => {});
    } else {
      this.#child.closeStdin();
    }
    if (await this.#exitedWithin(graceMs)) return this.closed;
    this.#killReason ??= `did not exit within ${graceMs} ms of shutdown`;
    this.#child.kill("SIGTERM");
    if (await this.#exitedWithin(graceMs)) return this.closed;
    this.#child.kill("SIGKILL");
    return this.closed;
  }

  #exitedWithin(ms: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.closed.then(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }

  #log(line: string, stream: "stderr" | "stdout"): void {
    try {
      this.#options.onLog(line, { module: this.module, pid: this.pid, stream });
    } catch {
      // A throwing log sink must not break the connection.
    }
  }

  #keepTail(text: string): void {
    this.#tail += text;
    if (this.#tail.length > STDERR_TAIL_BYTES) {
      this.#tail = this.#tail.slice(this.#tail.length - STDERR_TAIL_BYTES);
    }
  }

  async #pumpStdout(): Promise<void> {
    const decoder = new TextDecoder();
    const frames = new FrameReader({
      maxFrameBytes: this.#options.maxFrameBytes,
      onFrame: (frame) => this.#onMessage(decodeMessage(frame)),
      onStray: (bytes) => {
        const text = decoder.decode(bytes, { stream: true });
        this.#keepTail(text);
        for (const line of text.split("\n")) {
          if (line) this.#log(line, "stdout");
        }
      },
    });
    const reader = stdoutReader(this.#child.stdout);
    this.#stdoutReader = reader;
    try {
      while (true) {
        const value = await reader.read();
        if (value === undefined) break;
        frames.push(value);
      }
      this.#truncated = frames.end().truncated;
    } catch (error: unknown) {
      if (error instanceof ProtocolError) {
        this.#protocolError = new ProtocolError(error.message, {
          module: this.module,
          cause: error,
        });
        this.kill(`killed by airlock after a protocol error: ${error.message}`);
        reader.cancel().catch(() => {});
      } else if (this.#exit === undefined && !this.#stdoutCancelled) {
        // Reading stopped: nothing more would ever be answered, so stop the
        // worker now rather than let its calls wait for their deadlines.
        const why = error instanceof Error ? error.message : String(error);
        this.#keepTail(`\n[airlock: cannot read worker stdout: ${why}]\n`);
        this.kill(
          `killed by airlock because its stdout could not be read: ${why}`,
        );
      }
    }
  }

  #stdoutReader: ChunkReader | undefined;
  #stdoutCancelled = false;

  async #pumpStderr(): Promise<void> {
    const decoder = new TextDecoder();
    let partial = "";
    const reader = this.#child.stderr.getReader();
    this.#stderrReader = reader;
    try {
      while (true) {
        const { value, done } = await reader.read();
        if (done) break;
        const text = decoder.decode(value, { stream: true });
        this.#keepTail(text);
        const lines = (partial + text).split("\n");
        partial = lines.pop() ?? "";
        for (const line of lines) this.#log(line, "stderr");
      }
    } catch {
      // The pipe went away with the process.
    }
    if (partial) this.#log(partial, "stderr");
  }

  #stderrReader: ReadableStreamDefaultReader<Uint8Array> | undefined;

  #onMessage(message: WorkerMessage | ReturnType<typeof decodeMessage>): void {
    if (!this.#hello) {
      if (message.type === "hello") {
        this.#hello = message;
        this.#syncRef();
        this.#resolveReady(message);
        return;
      }
      if (message.type === "fatal") {
        this.#fatal = { phase: message.phase, error: message.error };
        return;
      }
      throw new ProtocolError(
        `Cannot read message: expected "hello" first, received "${message.type}"`,
      );
    }
    switch (message.type) {
      case "result":
      case "error": {
        const call = this.#pending.get(message.id);
        if (!call) {
          // Late answer to a call that timed out or was cancelled: dropped.
          const grace = this.#cancelling.get(message.id);
          if (grace !== undefined) {
            clearTimeout(grace);
            this.#cancelling.delete(message.id);
            this.#syncRef();
          }
          return;
        }
        this.#pending.delete(message.id);
        this.#clearTimer(message.id);
        this.#consecutiveTimeouts = 0;
        this.#syncRef();
        if (message.type === "result") call.resolve(message.value);
        else call.reject(this.#remoteError(call.op, message.error));
        this.#options.events.onAnswer(call);
        return;
      }
      case "shutdown-ack":
        return;
      case "hello":
      case "fatal":
        throw new ProtocolError(
          `Cannot read message: unexpected "${message.type}" after hello`,
        );
      default:
        throw new ProtocolError(
          `Cannot read message: a worker may not send "${message.type}"`,
        );
    }
  }

  #remoteError(op: string, value: unknown): RemoteError {
    return toRemoteError(value, { module: this.module, op, pid: this.pid });
  }

  async #watchExit(
    stdoutDone: Promise<void>,
    stderrDone: Promise<void>,
  ): Promise<ConnectionExit> {
    const status = await this.#child.exited;
    live.delete(this.#child);
    // A reply written just before exiting still counts: drain stdout first.
    let drainTimer: ReturnType<typeof setTimeout> | undefined;
    const drained = await Promise.race([
      Promise.all([stdoutDone, stderrDone]).then(() => true),
      new Promise<false>((resolve) => {
        drainTimer = setTimeout(() => resolve(false), DRAIN_AFTER_EXIT_MS);
      }),
    ]);
    clearTimeout(drainTimer);
    if (!drained) {
      this.#stdoutCancelled = true;
      this.#stdoutReader?.cancel().catch(() => {});
      this.#stderrReader?.cancel().catch(() => {});
    }
    const mapped = this.#options.command.mapExit(status.code, status.signal);
    const truncated = this.#truncated;
    const exit: ConnectionExit = {
      code: mapped.code,
      signal: mapped.signal,
      reason: this.#killReason ??
        (truncated && this.#hello
          ? `exited in the middle of a frame (${truncated.receivedBytes} of ${truncated.expectedBytes} bytes written)`
          : undefined),
      requested: this.#requested,
      stderrTail: this.#tail,
      pid: this.pid,
      protocolError: this.#protocolError,
    };
    this.#exit = exit;
    if (this.#deadlineTimer !== undefined) clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = undefined;
    for (const timer of this.#cancelling.values()) clearTimeout(timer);
    this.#timers.clear();
    this.#cancelling.clear();
    if (!this.#hello) this.#rejectReady(this.#startError(exit));
    const lost = [...this.#pending.values()];
    this.#pending.clear();
    if (lost.length > 0) this.#options.events.onLost(lost, exit);
    this.#syncRef();
    return exit;
  }

  #startError(exit: ConnectionExit): WorkerStartError {
    const base = {
      module: this.module,
      pid: this.spawnPid,
      exitCode: exit.code,
      signal: exit.signal,
      stderrTail: exit.stderrTail,
    };
    if (this.#fatal) {
      const error = this.#fatal.error;
      return new WorkerStartError({
        ...base,
        failure: this.#fatal.phase,
        detail: this.#fatal.phase === "import"
          ? `the module threw during import: ${error.name}: ${error.message}`
          : `invalid worker definition: ${error.message}`,
        remoteMessage: error.message,
        remoteStack: error.stack,
        cause: error,
      });
    }
    if (exit.protocolError) {
      return new WorkerStartError({
        ...base,
        failure: "handshake",
        detail:
          `it broke the protocol before ready: ${exit.protocolError.message}`,
        cause: exit.protocolError,
      });
    }
    const truncated = this.#truncated
      ? ` (a frame was cut short: ${this.#truncated.receivedBytes} of ${this.#truncated.expectedBytes} bytes)`
      : "";
    return new WorkerStartError({
      ...base,
      failure: "exited",
      detail: `${
        exit.reason ?? "the process ended before it was ready"
      }${truncated}`,
    });
  }
}

/**
 * The crash error for a call lost with a worker process.
 *
 * @param module The worker module (or command).
 * @param call The call.
 * @param exit How the process ended.
 * @returns The error.
 */
export function crashError(
  module: string,
  call: CallRecord,
  exit: ConnectionExit,
): WorkerCrashedError {
  return new WorkerCrashedError({
    module,
    pid: exit.pid,
    exitCode: exit.code,
    signal: exit.signal,
    stderrTail: exit.stderrTail,
    op: call.op,
    reason: exit.protocolError
      ? `the worker broke the protocol (${exit.protocolError.message})`
      : exit.reason,
    ...(exit.protocolError ? { cause: exit.protocolError } : {}),
  });
}

/**
 * Rebuilds a `RemoteError` from what a worker sent as an error.
 *
 * @param value The decoded error value.
 * @param where The module, op and pid.
 * @returns The remote error.
 */
export function toRemoteError(
  value: unknown,
  where: { module: string; op: string; pid: number },
): RemoteError {
  if (value instanceof Error) {
    const properties: Record<string, unknown> = {};
    for (const key of Object.keys(value)) {
      if (key === "name" || key === "message" || key === "stack") continue;
      if (key === "cause") continue;
      properties[key] = (value as unknown as Record<string, unknown>)[key];
    }
    return new RemoteError({
      ...where,
      remoteName: value.name,
      remoteMessage: value.message,
      remoteStack: value.stack,
      properties,
      ...("cause" in value ? { cause: value.cause } : {}),
    });
  }
  return new RemoteError({
    ...where,
    remoteName: "Error",
    remoteMessage: typeof value === "string"
      ? value
      : `the handler threw a non-error value: ${String(value)}`,
    properties: { value },
  });
}

/**
 * Spawns a worker and returns its connection at once; await `ready` for the
 * handshake.
 *
 * @param options What to run and where events go.
 * @returns The connection.
 * @throws {WorkerStartError} when the program cannot be spawned.
 */
export function startConnection(options: ConnectionOptions): Connection {
  let child: ChildHandle;
  try {
    child = options.adapter.spawn(options.command.spawn);
  } catch (error: unknown) {
    const program = options.command.spawn.argv[0] ?? "";
    throw new WorkerStartError({
      module: options.command.module,
      failure: "spawn",
      detail: `cannot spawn "${program}": ${
        error instanceof Error ? error.message : String(error)
      }`,
      cause: error,
    });
  }
  return new Connection(options, child);
}
