/**
 * One live worker process: spawn, ready handshake, request-id routing,
 * per-call deadlines, cancel with a grace period, stderr tail, and exit
 * diagnostics. Sessions, one-shot calls and pools are built from these.
 *
 * @module
 */

import {
  ProtocolError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../errors.ts";
import { FrameReader } from "../protocol/frame_reader.ts";
import {
  CONTROL_ID,
  decodeMessage,
  type EndMessage,
  type ErrorMessage,
  type HelloMessage,
  type ItemsMessage,
  LIMIT_MESSAGE_VERSION,
  LIVENESS_MESSAGE_VERSION,
  PID_MESSAGE_VERSION,
  type ResultMessage,
  type WorkerMessage,
} from "../protocol/messages.ts";
import { encodeMessage } from "../protocol/encode_message.ts";
import { type ChunkReader, chunkReader } from "../runtime/chunk_reader.ts";
import type { ResolvedPermissions } from "../runtime/permissions.ts";
import type { ChildHandle, RuntimeAdapter } from "../runtime/types.ts";
import type { WorkerCommand } from "../runtime/launch/types.ts";
import type { SandboxBackend } from "../runtime/sandbox/types.ts";
import {
  type LimitMechanisms,
  NO_MECHANISMS,
} from "../runtime/sandbox/limits/types.ts";
import {
  holdsFile,
  isRunning,
  readRssBytes,
  stdoutTarget,
} from "../runtime/proc.ts";
import { DeadlineQueue } from "./_deadlines.ts";
import { markExecuted } from "./_call.ts";
import { WriteAheadWindow } from "./_write_ahead.ts";
import { clockMayHaveMoved, readingAnswers } from "./_metrics.ts";
import {
  type ConnectionExit,
  exitReason,
  type StartFatal,
  type Truncation,
} from "./_exit.ts";
import { startError } from "./_start_error.ts";
import { WorkerLog } from "./_log.ts";
import type { LogSink } from "./_log_sink.ts";
import { describeValue, toRemoteError } from "./_remote_error.ts";
import type { HintContext } from "./_hints.ts";
import { registerWorker, unregisterWorker } from "./_registry.ts";
import { answerDelayMs } from "./_faults.ts";
import {
  STREAM_END,
  type StreamableCall,
  type StreamCarrier,
  streamOf,
} from "./_stream.ts";

/**
 * How long a worker whose call timed out has to answer the liveness check
 * (`ping`, answered from its event loop) before it counts as wedged (its
 * event loop blocked, e.g. by a handler stuck in synchronous code) and is
 * ended. Long enough for a loaded machine's scheduling and a GC pause.
 */
export const LIVENESS_GRACE_MS = 1_000;
/**
 * How long a call settled only once stopped (`settle: "stopped"`) waits,
 * after its worker's spawned process exited, for the worker's own process
 * (which a sandbox wrapper may outlive by moments) to be gone.
 */
const STOPPED_GONE_LIMIT_MS = 2_000;

/** How long to keep reading stdout after the process exited. */
const DRAIN_AFTER_EXIT_MS = 1_000;
/** How long a process may run on after its stdout ended before it is killed. */
const STDOUT_END_GRACE_MS = 1_000;
/**
 * How often a sandboxed worker with calls in flight is checked for still
 * holding its stdout (the sandbox's own processes keep the pipe open, so
 * its end is never seen).
 */
const STDOUT_CHECK_MS = 1_000;

/**
 * One call on its way through a connection. Owned by a session or pool. A
 * streaming call's values go to its `stream`; its `end` resolves it with
 * `STREAM_END`, or with the values collected when it is `awaited`.
 */
export interface CallRecord extends StreamableCall {
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
  /** Whether its promise has settled. */
  settled: boolean;
  /** Settles the call. */
  resolve(value: unknown): void;
  /** Settles the call. */
  reject(error: unknown): void;
  /**
   * Its deadline in the connection that holds it (ms since the epoch); 0
   * while it has none. Kept by the connection.
   */
  dueAt: number;
  /** When that deadline started counting. Kept by the connection. */
  dueFrom: number;
  /** Its place in the order calls were written to that connection. */
  writtenSeq: number;
  /**
   * Whether its handler may have started, in any attempt: set when it is
   * written to a free slot, when a call written ahead starts, when it is
   * abandoned while written, and when it is lost with a worker that may
   * have started it. Never cleared: it decides `executed` ("maybe" or "no").
   */
  mayHaveRun: boolean;
  /**
   * Whether a timed-out or aborted call rejects only once its handler is
   * no longer running (`settle: "stopped"`).
   */
  readonly settleStopped: boolean;
  /**
   * Whether it must be answered with a value (a `setup` call): `items` for
   * it is a protocol error.
   */
  plain?: boolean;
}

/** What a connection tells its owner. */
export interface ConnectionEvents {
  /**
   * Calls that were in flight when the process went away, not yet settled,
   * in the order they were written; `unstarted` holds those of them the
   * worker is known never to have started (written ahead, still in its
   * queue), which may run elsewhere whatever their op.
   */
  onLost(
    calls: CallRecord[],
    exit: ConnectionExit,
    unstarted: ReadonlySet<CallRecord>,
  ): void;
  /** A call passed its deadline and was rejected. */
  onTimeout(call: CallRecord): void;
  /** The worker finished something it was running (occupancy went down). */
  onSlotFree?(): void;
  /**
   * A call written ahead (held in the worker's queue, see
   * `Connection.limit`) starts now: a call before it left its slot.
   */
  onStarted?(call: CallRecord): void;
  /**
   * The liveness check after a timeout ended: `true`, the worker answered
   * (slow, kept); `false`, it did not and is being killed (wedged).
   */
  onLiveness?(alive: boolean): void;
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
  /** The worker's grants and working directory, for the access hints of its errors. */
  grants?: { permissions: ResolvedPermissions; cwd: string };
  /**
   * The worker, already started by its launcher's transport
   * (`command.transport`); omitted: `command.spawn` is spawned here.
   */
  child?: ChildHandle;
  /**
   * When the start began, if before this connection (a transport's
   * connect counts against `startTimeoutMs`); omitted: now.
   */
  startBegan?: number;
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
  #workerPid: number | undefined;
  #pending = new Map<number, CallRecord>();
  /** Deadlines of the calls written. */
  #deadlines = new DeadlineQueue<CallRecord>(
    (call, startedAt) => this.#timeout(call, startedAt),
    () => this.#pending.values(),
  );
  #cancelling = new Map<number, ReturnType<typeof setTimeout>>();
  #log: WorkerLog;
  #killReason: string | undefined;
  #requested = false;
  #protocolError: ProtocolError | undefined;
  #exit: ConnectionExit | undefined;
  #resolveReady!: (hello: HelloMessage) => void;
  #rejectReady!: (error: Error) => void;
  #fatal: StartFatal | undefined;
  #truncated: Truncation | undefined;
  #consecutiveTimeouts = 0;
  /** Which written calls wait in the worker's queue, and which never started. */
  #window = new WriteAheadWindow<CallRecord>();
  /**
   * Calls abandoned with `settle: "stopped"`, by id, with what they reject
   * with: they settle once the worker answers them or is gone.
   */
  #stopping = new Map<number, { call: CallRecord; reason: unknown }>();
  /** The grace timer of the liveness check in progress, if any. */
  #liveness: ReturnType<typeof setTimeout> | undefined;

  /** @internal Use {@linkcode startConnection}. */
  constructor(options: ConnectionOptions, child: ChildHandle) {
    this.#options = options;
    this.#child = child;
    this.module = options.command.module;
    this.spawnPid = child.pid;
    this.startedAt = Date.now();
    this.#log = new WorkerLog(options.onLog, () => ({
      module: this.module,
      pid: this.pid,
    }));
    this.ready = new Promise<HelloMessage>((resolve, reject) => {
      this.#resolveReady = resolve;
      this.#rejectReady = reject;
    });
    this.ready.catch(() => {});
    live.add(child);
    registerWorker(this, options.command.local);
    reapOnExit(options.adapter);
    const stdoutDone = this.#pumpStdout();
    const stderrDone = this.#log.pumpStderr(child.stderr);
    this.closed = this.#watchExit(stdoutDone, stderrDone);
    if (options.startTimeoutMs > 0) {
      const began = options.startBegan ?? this.startedAt;
      const timer = setTimeout(() => {
        if (this.#hello || this.#exit) return;
        const error = new WorkerTimeoutError({
          module: this.module,
          pid: this.spawnPid,
          timeoutMs: options.startTimeoutMs,
          elapsedMs: Date.now() - began,
          phase: "start",
        });
        this.#rejectReady(error);
        this.kill("not ready before startTimeoutMs");
      }, Math.max(0, options.startTimeoutMs - (this.startedAt - began)));
      this.ready.then(() => clearTimeout(timer), () => clearTimeout(timer));
    }
  }

  /**
   * The worker's pid once ready: the real process below any local wrapper
   * (found by the launch, never taken from the hello, which a worker can
   * forge); through a launcher, the far side's pid from the hello.
   */
  get pid(): number {
    return this.#workerPid ?? this.spawnPid;
  }

  /** The hello, once ready. */
  get hello(): HelloMessage | undefined {
    return this.#hello;
  }

  /** The OS sandbox backends that confine the worker, outermost first. */
  get sandboxes(): readonly SandboxBackend[] {
    return this.#options.command.sandboxes;
  }

  /** Which mechanism holds each of the worker's limits. */
  get limits(): LimitMechanisms {
    return this.#options.command.limits?.mechanisms ?? NO_MECHANISMS;
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
    return this.#log.tail;
  }

  /** Keeps the worker's output from now on out of the log (not the tail). */
  quietLog(): void {
    this.#log.quiet();
  }

  /** Resident memory of the worker process in bytes, when it can be read. */
  rssBytes(): number | undefined {
    if (!this.#options.command.local) return undefined;
    return readRssBytes(this.pid);
  }

  /**
   * Whether a call in flight here is a stream that has sent values: it may
   * hold its slot for long, so nothing should be written ahead behind it.
   */
  get streaming(): boolean {
    for (const call of this.#pending.values()) {
      if (call.stream !== undefined) return true;
    }
    return false;
  }

  /**
   * Whether a liveness check is in progress (a call timed out, the worker
   * has not answered the ping yet): nothing new should be written to it.
   */
  get checking(): boolean {
    return this.#liveness !== undefined;
  }

  /** Whether the worker starts queued calls in arrival order and honours `limit`. */
  get ordered(): boolean {
    return (this.#hello?.version ?? 0) >= LIMIT_MESSAGE_VERSION;
  }

  /**
   * Limits a worker that honours it ({@linkcode Connection.ordered}) to
   * `concurrency` calls at once, so that calls written beyond that wait in
   * its queue and start, in order, as slots free up; their deadlines start
   * when they do. Send before the first call.
   *
   * @param concurrency Calls at once (at most the worker's own).
   * @returns Whether the worker honours it.
   */
  limit(concurrency: number): boolean {
    if (!this.ordered || !this.#hello || this.#exit) return false;
    this.#window.limit(Math.min(concurrency, this.#hello.concurrency));
    this.#child.write(
      encodeMessage({
        type: "limit",
        id: CONTROL_ID,
        concurrency: this.#window.slots,
      }),
    ).catch(() => {});
    return true;
  }

  /**
   * Writes a call to the worker. Its promise settles through the record.
   *
   * @param call The call.
   * @returns Whether it starts now; `false` when it is written ahead and
   *   waits in the worker's queue (`onStarted` tells when it starts).
   */
  send(call: CallRecord): boolean {
    call.attempts++;
    this.#pending.set(call.id, call);
    // A deadline it had in an earlier connection is not one here.
    call.dueAt = 0;
    this.#syncRef();
    // Written ahead, it waits in the worker's queue, its deadline with it.
    const ahead = this.#window.written(call, this.#pending.size);
    if (!ahead) call.mayHaveRun = true;
    if (!ahead && call.timeoutMs > 0) {
      // The deadline counts from when the call is written. Until the write
      // completes it also counts from now, so a worker that stopped reading
      // its stdin (a full pipe) cannot hold the call forever.
      this.#deadlines.add(call);
    }
    const written = this.#child.write(call.chunks);
    // Frames sent in one turn share one write (and its promise): one
    // handler per write, not per call, restarts their deadlines (a call
    // written ahead has none until it is promoted: restarting it is a no-op).
    if (written === this.#written) {
      if (call.timeoutMs > 0) this.#writtenCalls.push(call);
      return !ahead;
    }
    const calls: CallRecord[] = call.timeoutMs > 0 ? [call] : [];
    this.#written = written;
    this.#writtenCalls = calls;
    written.then(() => {
      if (this.#written === written) this.#written = undefined;
      this.#deadlines.restartAll(calls);
    }, () => {
      if (this.#written === written) this.#written = undefined;
      // The pipe broke: the exit handler reports the calls as lost.
    });
    return !ahead;
  }

  /** A call written ahead starts: its deadline starts now. */
  #start = (call: CallRecord): void => {
    call.mayHaveRun = true;
    if (call.timeoutMs > 0) this.#deadlines.add(call);
    this.#options.events.onStarted?.(call);
  };

  #inFlightHere = (call: CallRecord): boolean =>
    this.#pending.get(call.id) === call;

  /** Starts the calls written ahead that freed slots let start. */
  #promote(): void {
    if (this.#window.waiting === 0) return;
    this.#window.promote(this.#pending.size, this.#inFlightHere, this.#start);
  }

  /** The write the last call went into, while it is in progress. */
  #written: Promise<void> | undefined;
  /** The calls with a deadline in that write. */
  #writtenCalls: CallRecord[] = [];

  #timeout(call: CallRecord, startedAt: number): void {
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
    else this.#checkLiveness(call);
    this.#options.events.onTimeout(call);
  }

  /**
   * Asks the worker's event loop whether it turns (`ping`): a worker that
   * does not answer within {@linkcode LIVENESS_GRACE_MS} is wedged and is
   * killed, so the next call runs on a fresh one; one that answers is slow
   * and keeps its other calls. Workers of message version 4 answer it.
   */
  #checkLiveness(call: CallRecord): void {
    if (
      this.#liveness !== undefined || this.#exit !== undefined ||
      this.#killReason !== undefined ||
      (this.#hello?.version ?? 0) < LIVENESS_MESSAGE_VERSION
    ) {
      return;
    }
    this.#liveness = setTimeout(() => {
      this.#liveness = undefined;
      this.kill(
        `killed by airlock because it did not answer a liveness check within ${LIVENESS_GRACE_MS} ms after call "${call.op}" (id ${call.id}) timed out: its event loop is blocked (a handler stuck in synchronous code?)`,
      );
      this.#options.events.onLiveness?.(false);
    }, LIVENESS_GRACE_MS);
    this.#child.write(encodeMessage({ type: "ping", id: CONTROL_ID }))
      .catch(() => {});
  }

  #onPong(): void {
    if (this.#liveness === undefined) return;
    clearTimeout(this.#liveness);
    this.#liveness = undefined;
    this.#options.events.onLiveness?.(true);
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
    this.#deadlines.delete(call);
    if (!this.#window.abandoned(call)) this.#promote();
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
    if (call.settleStopped) {
      // Settles once the worker answers it (#stopped) or is gone.
      this.#stopping.set(call.id, { call, reason });
    } else {
      // Written, so perhaps started (a call written ahead may have started
      // in the worker before the answer that let it start was read).
      call.mayHaveRun = true;
      call.reject(reason);
    }
    this.#writeCancel(call.id);
  }

  /**
   * A call abandoned with `settle: "stopped"` got its answer: the handler
   * no longer runs. `dropped`: it never started here; any other answer: it
   * ran to its end (a worker older than message version 4 answers a call it
   * dropped with an error, so there it may have run).
   */
  #stopped(id: number, dropped: boolean): void {
    const entry = this.#stopping.get(id);
    if (entry === undefined) return;
    this.#stopping.delete(id);
    const { call, reason } = entry;
    if (!dropped) {
      call.mayHaveRun = true;
      const version = this.#hello?.version ?? 0;
      if (version >= LIVENESS_MESSAGE_VERSION) markExecuted(reason, "yes");
    }
    call.reject(reason);
  }

  /**
   * The worker exited with calls abandoned with `settle: "stopped"`: they
   * reject once its own process is gone (a sandbox's wrapper may exit a
   * moment before it), the handler perhaps cut short.
   */
  async #stoppedByExit(): Promise<void> {
    const entries = [...this.#stopping.values()];
    this.#stopping.clear();
    if (this.#options.command.local) {
      const until = Date.now() + STOPPED_GONE_LIMIT_MS;
      while (isRunning(this.pid) && Date.now() < until) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
    }
    for (const { call, reason } of entries) {
      call.mayHaveRun = true;
      call.reject(reason);
    }
  }

  /** Calls the worker is still running: in flight plus abandoned ones that have not stopped. */
  get occupancy(): number {
    return this.#pending.size + this.#cancelling.size;
  }

  #writeCancel(id: number): void {
    if (this.#exit) return;
    this.#child.write(encodeMessage({ type: "cancel", id })).catch(() => {});
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
  #slotFreeQueued = false;
  #slotFree = (): void => {
    this.#slotFreeQueued = false;
    this.#options.events.onSlotFree?.();
  };

  #syncRef(): void {
    const occupancy = this.occupancy;
    const freed = occupancy < this.#lastOccupancy;
    this.#lastOccupancy = occupancy;
    if (freed && !this.#slotFreeQueued) {
      // Once per turn, however many answers a read brought.
      this.#slotFreeQueued = true;
      queueMicrotask(this.#slotFree);
    }
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

  /** The sandboxed worker and the pipe its stdout is, while checked. */
  #stdoutHeld: { pid: number; pipe: string } | undefined;
  #stdoutCheck: ReturnType<typeof setInterval> | undefined;
  #stdoutMissing = false;

  /**
   * Inside the OS sandbox the sandbox's processes hold the worker's stdout
   * too, so a worker that closes it is never seen as end-of-file: while
   * calls are in flight, check once a second that the worker still holds
   * the pipe (any descriptor on it).
   */
  #watchStdoutOf(pid: number | undefined): void {
    const command = this.#options.command;
    if (pid === undefined || !command.local || command.sandboxes.length === 0) {
      return;
    }
    const pipe = stdoutTarget(pid);
    // A pipe, or a socket pair (Bun's node:child_process).
    if (!pipe?.startsWith("pipe:") && !pipe?.startsWith("socket:")) return;
    this.#stdoutHeld = { pid, pipe };
    // One unref'd timer for the worker's life: nothing on the call path.
    const timer = setInterval(() => this.#checkStdout(), STDOUT_CHECK_MS);
    (timer as { unref?: () => void }).unref?.();
    this.#stdoutCheck = timer;
  }

  #stopStdoutCheck(): void {
    this.#stdoutHeld = undefined;
    if (this.#stdoutCheck !== undefined) clearInterval(this.#stdoutCheck);
    this.#stdoutCheck = undefined;
  }

  #checkStdout(): void {
    const held = this.#stdoutHeld;
    if (held === undefined || this.#pending.size === 0) {
      this.#stdoutMissing = false;
      return;
    }
    // A process being torn down drops its files before it is a zombie:
    // only one seen running without its stdout twice, a check apart, closed
    // it on purpose.
    if (holdsFile(held.pid, held.pipe) !== false || !isRunning(held.pid)) {
      this.#stdoutMissing = false;
      return;
    }
    if (!this.#stdoutMissing) {
      this.#stdoutMissing = true;
      return;
    }
    this.#stopStdoutCheck();
    this.#log.note("the worker closed its stdout");
    this.kill(
      "killed by airlock because it closed its stdout and kept running (it could never answer)",
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
      if (!this.#shutdownWritten) this.#writeShutdown();
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

  /**
   * Writes the shutdown message now, behind the calls already written: the
   * worker exits as soon as they are answered, without waiting for the
   * parent to read the answers (a one-shot's process is gone one round trip
   * sooner). A later {@linkcode shutdown} only waits, and escalates.
   */
  endAfterCalls(): void {
    if (this.#exit || !this.#hello || this.#protocolError) return;
    if (!this.#shutdownWritten) this.#writeShutdown();
  }

  #shutdownWritten = false;

  #writeShutdown(): void {
    this.#shutdownWritten = true;
    this.#child.write(encodeMessage({ type: "shutdown", id: CONTROL_ID }))
      .catch(() => {});
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

  async #pumpStdout(): Promise<void> {
    const frames = new FrameReader({
      maxFrameBytes: this.#options.maxFrameBytes,
      onFrame: (frame) => {
        const message = decodeMessage(frame);
        const bytes = frame.head.byteLength + frame.area.byteLength;
        // Test kit (delayAnswers): hold back the worker's messages.
        const delayMs = this.#hello ? answerDelayMs(this) : 0;
        if (delayMs === 0) return this.#onMessage(message, bytes);
        setTimeout(() => {
          try {
            this.#onMessage(message, bytes);
          } catch (error: unknown) {
            this.kill(`killed by airlock after a protocol error: ${error}`);
          }
        }, delayMs);
      },
      onStray: (bytes) => this.#log.stray(bytes),
    });
    const reader = chunkReader(this.#child.stdout, frames);
    this.#stdoutReader = reader;
    try {
      while (true) {
        const { done, value } = await reader.read();
        if (done || value === undefined) break;
        readingAnswers(() => frames.push(value));
      }
      this.#truncated = frames.end().truncated;
      this.#log.endStray();
      if (this.#exit === undefined) this.#onStdoutEnd();
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
        this.#log.note(`cannot read worker stdout: ${why}`);
        this.kill(
          `killed by airlock because its stdout could not be read: ${why}`,
        );
      }
    }
  }

  #stdoutReader: ChunkReader | undefined;
  #stdoutCancelled = false;

  /**
   * The worker's stdout ended. An exiting process closes it just before
   * its exit is seen; one that is still running after a grace period closed
   * it on purpose and can never answer again, so it is stopped and its
   * calls fail now rather than at their deadlines.
   */
  #onStdoutEnd(): void {
    const timer = setTimeout(() => {
      if (this.#exit !== undefined) return;
      this.#log.note("the worker closed its stdout");
      this.kill(
        "killed by airlock because it closed its stdout and kept running (it could never answer)",
      );
    }, STDOUT_END_GRACE_MS);
    (timer as { unref?: () => void }).unref?.();
    this.closed.then(() => clearTimeout(timer));
  }

  /** What streams of this connection's calls use to credit the worker. */
  #carrier: StreamCarrier = {
    credit: (id, items, bytes) => {
      if (this.#exit || !this.#pending.has(id)) return;
      this.#child.write(encodeMessage({ type: "credit", id, items, bytes }))
        .catch(() => {});
    },
    holdDeadline: (id, held) => {
      const call = this.#pending.get(id);
      if (!call || call.timeoutMs <= 0) return;
      if (held) this.#deadlines.delete(call);
      else this.#deadlines.add(call);
    },
  };

  #onMessage(
    message: WorkerMessage | ReturnType<typeof decodeMessage>,
    payloadBytes: number,
  ): void {
    if (!this.#hello) return this.#beforeHello(message);
    switch (message.type) {
      case "result":
      case "error":
      case "end": {
        const call = this.#pending.get(message.id);
        if (!call) {
          // Late answer to a call that timed out or was cancelled: dropped.
          this.#lateAnswer(message.id, false);
          return;
        }
        this.#pending.delete(message.id);
        try {
          this.#deadlines.delete(call);
          this.#promote();
          this.#consecutiveTimeouts = 0;
          this.#syncRef();
        } finally {
          // Out of the pending map, the call settles here or never.
          this.#answer(call, message);
        }
        return;
      }
      case "items":
        return this.#onItems(message, payloadBytes);
      case "dropped":
        if (this.#pending.has(message.id)) {
          throw new ProtocolError(
            `Cannot read message: "dropped" for call ${message.id}, which was not cancelled`,
          );
        }
        this.#lateAnswer(message.id, true);
        return;
      case "pong":
        this.#onPong();
        return;
      case "progress": {
        const onProgress = this.#pending.get(message.id)?.onProgress;
        if (onProgress) {
          try {
            onProgress(message.value);
          } catch {
            // A throwing progress callback must not break the connection.
          }
          clockMayHaveMoved();
        }
        return;
      }
      case "shutdown-ack":
        // Asked for (by endAfterCalls): the exit that follows is no crash.
        if (this.#shutdownWritten) this.#requested = true;
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

  /** Before the hello: the hello, or the worker's fatal report. */
  #beforeHello(
    message: WorkerMessage | ReturnType<typeof decodeMessage>,
  ): void {
    if (message.type === "hello") {
      this.#hello = message;
      // A worker of version 3 starts queued calls in arrival order.
      if (message.version >= LIMIT_MESSAGE_VERSION) {
        this.#window.ordered(message.concurrency);
      }
      this.#workerPid = this.#options.command.local
        ? this.#options.command.workerPid(this.spawnPid)
        : message.pid;
      // The host's pid, which the worker's logs and errors are reported
      // under, written before any call (a handler reads it as this.pid).
      if (
        this.#options.command.local &&
        message.version >= PID_MESSAGE_VERSION
      ) {
        this.#child.write(
          encodeMessage({ type: "pid", id: CONTROL_ID, pid: this.pid }),
        ).catch(() => {});
      }
      this.#watchStdoutOf(this.#workerPid);
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

  /** A stream's values, handed to its call (dropped once it ended here). */
  #onItems(message: ItemsMessage, payloadBytes: number): void {
    // Values of a call that timed out or was cancelled are dropped.
    const call = this.#pending.get(message.id);
    if (!call) return;
    if (call.plain) {
      throw new ProtocolError(
        `Cannot read message: "items" for call "${call.op}" (id ${call.id}), which must be answered with a value`,
      );
    }
    const refused = streamOf(call).receive(
      message.values,
      payloadBytes,
      this.#carrier,
    );
    if (refused !== undefined) {
      this.#abandon(
        call,
        new ProtocolError(refused.message, { module: this.module }),
        "refused",
      );
    }
  }

  /** The answer to a call abandoned here: its handler has stopped. */
  #lateAnswer(id: number, dropped: boolean): void {
    this.#window.answered(id);
    const grace = this.#cancelling.get(id);
    if (grace !== undefined) {
      clearTimeout(grace);
      this.#cancelling.delete(id);
      this.#syncRef();
    }
    this.#stopped(id, dropped);
  }

  /** What access hints are computed from, when the owner gave the grants. */
  #hintContext(): HintContext | undefined {
    const grants = this.#options.grants;
    if (grants === undefined) return undefined;
    const adapter = this.#options.adapter;
    return {
      permissions: grants.permissions,
      cwd: grants.cwd,
      sandboxed: this.#options.command.sandboxes.length > 0,
      exists(path) {
        const identity = adapter.pathIdentity(path);
        return identity === "?" ? undefined : identity !== "-";
      },
    };
  }

  /**
   * Settles a call with its answer. Total: whatever the worker sent, the
   * call settles (a hostile error value becomes a `RemoteError` saying so,
   * and should even that fail, a `ProtocolError`).
   */
  #answer(
    call: CallRecord,
    message: ResultMessage | ErrorMessage | EndMessage,
  ): void {
    try {
      if (message.type === "result") {
        call.resolve(message.value);
      } else if (message.type === "end") {
        // Awaited as a whole: the values it collected; iterated: the end.
        call.resolve(
          call.awaited ? call.stream?.collect() ?? [] : STREAM_END,
        );
      } else {
        const error = toRemoteError(message.error, {
          module: this.module,
          op: call.op,
          pid: this.pid,
        }, this.#hintContext());
        // The handler threw: it ran to its end.
        markExecuted(error, "yes");
        call.reject(error);
      }
    } catch (error: unknown) {
      const failure = new ProtocolError(
        `Cannot settle call "${call.op}" (id ${call.id}) with the answer of the worker: ${
          describeValue(error)
        }`,
        { module: this.module, cause: error },
      );
      // Answered: the handler ran to its end.
      markExecuted(failure, "yes");
      call.reject(failure);
    }
  }

  async #watchExit(
    stdoutDone: Promise<void>,
    stderrDone: Promise<void>,
  ): Promise<ConnectionExit> {
    const status = await this.#child.exited;
    live.delete(this.#child);
    unregisterWorker(this);
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
      this.#log.cancelStderr();
    }
    const command = this.#options.command;
    const mapped = command.mapExit(status.code, status.signal);
    // Read before the group goes; a worker airlock killed itself was not
    // ended by a limit.
    const limit = this.#killReason === undefined
      ? command.limits?.breach(mapped)
      : undefined;
    command.limits?.release();
    const exit: ConnectionExit = {
      code: mapped.code,
      signal: mapped.signal,
      reason: exitReason(
        this.#killReason,
        this.#truncated,
        this.#hello !== undefined,
      ),
      requested: this.#requested,
      stderrTail: this.#log.tail,
      pid: this.pid,
      protocolError: this.#protocolError,
      limit,
    };
    this.#exit = exit;
    this.#deadlines.stop();
    this.#stopStdoutCheck();
    const lost = [...this.#pending.values()];
    this.#pending.clear();
    const unstarted = this.#window.unstarted(
      lost,
      drained && !this.#truncated && !this.#protocolError,
    );
    // Not known to be unstarted: it may have run (a call written ahead may
    // have started before the answer that let it start was read).
    for (const call of lost) {
      if (!unstarted.has(call)) call.mayHaveRun = true;
    }
    for (const timer of this.#cancelling.values()) clearTimeout(timer);
    this.#cancelling.clear();
    if (this.#liveness !== undefined) clearTimeout(this.#liveness);
    this.#liveness = undefined;
    if (this.#stopping.size > 0) void this.#stoppedByExit();
    if (!this.#hello) {
      this.#rejectReady(
        startError(
          this.module,
          this.spawnPid,
          exit,
          this.#fatal,
          this.#truncated,
          this.#hintContext(),
        ),
      );
    }
    if (lost.length > 0) this.#options.events.onLost(lost, exit, unstarted);
    this.#syncRef();
    return exit;
  }
}

/**
 * Spawns a worker (or takes the one its transport started) and returns its
 * connection at once; await `ready` for the handshake.
 *
 * @param options What to run and where events go.
 * @returns The connection.
 * @throws {WorkerStartError} when the program cannot be spawned.
 */
export function startConnection(options: ConnectionOptions): Connection {
  if (options.child !== undefined) {
    return new Connection(options, options.child);
  }
  let child: ChildHandle;
  try {
    child = options.adapter.spawn(options.command.spawn);
  } catch (error: unknown) {
    options.command.limits?.release();
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
