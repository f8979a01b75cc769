/**
 * One live worker process: spawn, ready handshake, request-id routing, and
 * exit diagnostics. Sessions, one-shot calls and pools are built from
 * these. The calls in flight, their deadlines and the write-ahead window are
 * `_call_table.ts`; abandoned calls `_abandoned.ts`; the liveness check
 * `_liveness.ts`; occupancy `_occupancy.ts`; the stdout watch
 * `_stdout_watch.ts`; settling with an answer `_answer.ts`.
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
  type HelloMessage,
  type ItemsMessage,
  LIMIT_MESSAGE_VERSION,
  LIVENESS_MESSAGE_VERSION,
  type Message,
  PID_MESSAGE_VERSION,
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
import { readRssBytes } from "../runtime/proc.ts";
import type { CallRecord } from "./_call.ts";
import { CallTable } from "./_call_table.ts";
import { AbandonedCalls } from "./_abandoned.ts";
import { LIVENESS_GRACE_MS, LivenessCheck } from "./_liveness.ts";
import { Occupancy } from "./_occupancy.ts";
import {
  afterStdoutEnd,
  type StdoutWatch,
  watchStdout,
} from "./_stdout_watch.ts";
import { hintContext, settleWithAnswer } from "./_answer.ts";
import type { HintContext } from "./_hints.ts";
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
import { registerWorker, unregisterWorker } from "./_registry.ts";
import { answerDelayMs } from "./_faults.ts";
import { type StreamCarrier, streamOf } from "./_stream.ts";

/** How long to keep reading stdout after the process exited. */
const DRAIN_AFTER_EXIT_MS = 1_000;

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
  #resolveReady!: (hello: HelloMessage) => void;
  #rejectReady!: (error: Error) => void;
  /** The calls written and not answered, their deadlines and window. */
  #calls: CallTable;
  /** Abandoned calls the worker may still run. */
  #abandoned = new AbandonedCalls();
  /** The liveness check after a timeout. */
  #liveness = new LivenessCheck();
  /** Freed slots and idle waiters, told to the owner. */
  #occupancy: Occupancy;
  #log: WorkerLog;
  /** What access hints of the worker's errors are computed from. */
  #hints: () => HintContext | undefined;
  #consecutiveTimeouts = 0;
  #killReason: string | undefined;
  /** Whether the owner asked for the exit (no crash to report). */
  #requested = false;
  #shutdownWritten = false;
  #protocolError: ProtocolError | undefined;
  #fatal: StartFatal | undefined;
  #truncated: Truncation | undefined;
  #exit: ConnectionExit | undefined;
  #stdoutReader: ChunkReader | undefined;
  #stdoutCancelled = false;
  /** Whether a sandboxed worker still holds its stdout, while checked. */
  #stdoutWatch: StdoutWatch | undefined;
  /** What streams of this connection's calls use to credit the worker. */
  #carrier: StreamCarrier = {
    credit: (id, items, bytes) => {
      if (this.#exit || this.#calls.get(id) === undefined) return;
      this.#child.write(encodeMessage({ type: "credit", id, items, bytes }))
        .catch(() => {});
    },
    holdDeadline: (id, held) => this.#calls.holdDeadline(id, held),
  };

  /** @internal Use {@linkcode startConnection}. */
  constructor(options: ConnectionOptions, child: ChildHandle) {
    this.#options = options;
    this.#child = child;
    this.module = options.command.module;
    this.spawnPid = child.pid;
    this.startedAt = Date.now();
    this.#calls = new CallTable(
      (call, startedAt) => this.#timeout(call, startedAt),
      (call) => options.events.onStarted?.(call),
    );
    this.#occupancy = new Occupancy(options.events);
    this.#log = new WorkerLog(options.onLog, () => ({
      module: this.module,
      pid: this.pid,
    }));
    const sandboxed = options.command.sandboxes.length > 0;
    this.#hints = () => hintContext(options.grants, sandboxed, options.adapter);
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
    if (options.startTimeoutMs > 0) this.#startDeadline(options.startTimeoutMs);
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
    return this.#calls.size;
  }

  /** Calls the worker is still running: in flight plus abandoned ones that have not stopped. */
  get occupancy(): number {
    return this.#calls.size + this.#abandoned.running;
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

  /**
   * Whether a call in flight here is a stream that has sent values: it may
   * hold its slot for long, so nothing should be written ahead behind it.
   */
  get streaming(): boolean {
    return this.#calls.streaming;
  }

  /**
   * Whether a liveness check is in progress (a call timed out, the worker
   * has not answered the ping yet): nothing new should be written to it.
   */
  get checking(): boolean {
    return this.#liveness.active;
  }

  /** Whether the worker starts queued calls in arrival order and honours `limit`. */
  get ordered(): boolean {
    return (this.#hello?.version ?? 0) >= LIMIT_MESSAGE_VERSION;
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
    const window = this.#calls.window;
    window.limit(Math.min(concurrency, this.#hello.concurrency));
    this.#writeControl({
      type: "limit",
      id: CONTROL_ID,
      concurrency: window.slots,
    });
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
    const starts = this.#calls.add(call);
    this.#syncRef();
    this.#calls.wrote(call, this.#child.write(call.chunks));
    return starts;
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
    if (!this.#calls.has(call)) return false;
    this.#abandon(call, reason, "cancelled");
    return true;
  }

  /**
   * Settles once no call is in flight here.
   *
   * @returns A promise.
   */
  idle(): Promise<void> {
    return this.#occupancy.idle(this.#calls.size);
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

  #writeShutdown(): void {
    this.#shutdownWritten = true;
    this.#writeControl({ type: "shutdown", id: CONTROL_ID });
  }

  /** Writes a message that answers nothing; a broken pipe shows at exit. */
  #writeControl(message: Message): void {
    this.#child.write(encodeMessage(message)).catch(() => {});
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

  /** Fails the start if the worker is not ready within `startTimeoutMs`. */
  #startDeadline(startTimeoutMs: number): void {
    const began = this.#options.startBegan ?? this.startedAt;
    const timer = setTimeout(() => {
      if (this.#hello || this.#exit) return;
      const error = new WorkerTimeoutError({
        module: this.module,
        pid: this.spawnPid,
        timeoutMs: startTimeoutMs,
        elapsedMs: Date.now() - began,
        phase: "start",
      });
      this.#rejectReady(error);
      this.kill("not ready before startTimeoutMs");
    }, Math.max(0, startTimeoutMs - (this.startedAt - began)));
    this.ready.then(() => clearTimeout(timer), () => clearTimeout(timer));
  }

  #timeout(call: CallRecord, startedAt: number): void {
    if (!this.#calls.has(call)) return;
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
    if (this.#consecutiveTimeouts >= 2) {
      this.kill(
        `killed by airlock because call "${call.op}" (id ${call.id}) timed out twice in a row`,
      );
    } else {
      this.#checkLiveness(call);
    }
    this.#options.events.onTimeout(call);
  }

  /** Asks a worker of message version 4 whether its event loop turns. */
  #checkLiveness(call: CallRecord): void {
    if (
      this.#exit !== undefined || this.#killReason !== undefined ||
      (this.#hello?.version ?? 0) < LIVENESS_MESSAGE_VERSION
    ) {
      return;
    }
    const begun = this.#liveness.begin(() => {
      this.kill(
        `killed by airlock because it did not answer a liveness check within ${LIVENESS_GRACE_MS} ms after call "${call.op}" (id ${call.id}) timed out: its event loop is blocked (a handler stuck in synchronous code?)`,
      );
      this.#options.events.onLiveness?.(false);
    });
    if (begun) this.#writeControl({ type: "ping", id: CONTROL_ID });
  }

  #abandon(call: CallRecord, reason: unknown, what: string): void {
    this.#calls.abandoned(call);
    const grace = this.#options.cancelGraceMs;
    this.#abandoned.hold(call, grace, () => {
      this.kill(
        `killed by airlock because ${what} call "${call.op}" (id ${call.id}) did not stop within ${grace} ms`,
      );
    });
    this.#syncRef();
    this.#abandoned.settle(call, reason);
    if (!this.#exit) this.#writeControl({ type: "cancel", id: call.id });
  }

  /** The answer to a call abandoned here: its handler has stopped. */
  #lateAnswer(id: number, dropped: boolean): void {
    this.#calls.window.answered(id);
    if (this.#abandoned.release(id)) this.#syncRef();
    const version = this.#hello?.version ?? 0;
    this.#abandoned.stopped(id, dropped, version >= LIVENESS_MESSAGE_VERSION);
  }

  #syncRef(): void {
    const inFlight = this.#calls.size;
    const running = this.#abandoned.running;
    this.#occupancy.update(inFlight, running);
    if (this.#exit) return;
    this.#child.setRef(
      inFlight > 0 || running > 0 || !this.#hello || this.#requested ||
        this.#killReason !== undefined,
    );
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
      if (this.#exit === undefined) {
        afterStdoutEnd(
          this.closed,
          () => this.#exit === undefined,
          () => this.#closedStdout(),
        );
      }
    } catch (error: unknown) {
      this.#stdoutFailed(error, reader);
    }
  }

  /** Reading stdout threw: a protocol error, or the pipe failed. */
  #stdoutFailed(error: unknown, reader: ChunkReader): void {
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

  /** The worker closed its stdout and kept running: it can never answer. */
  #closedStdout(): void {
    this.#log.note("the worker closed its stdout");
    this.kill(
      "killed by airlock because it closed its stdout and kept running (it could never answer)",
    );
  }

  #onMessage(
    message: WorkerMessage | ReturnType<typeof decodeMessage>,
    payloadBytes: number,
  ): void {
    if (!this.#hello) return this.#beforeHello(message);
    switch (message.type) {
      case "result":
      case "error":
      case "end": {
        const call = this.#calls.get(message.id);
        if (!call) {
          // Late answer to a call that timed out or was cancelled: dropped.
          this.#lateAnswer(message.id, false);
          return;
        }
        try {
          this.#calls.answered(call);
          this.#consecutiveTimeouts = 0;
          this.#syncRef();
        } finally {
          // Out of the table, the call settles here or never.
          settleWithAnswer(call, message, this, this.#hints);
        }
        return;
      }
      case "items":
        return this.#onItems(message, payloadBytes);
      case "dropped":
        if (this.#calls.get(message.id) !== undefined) {
          throw new ProtocolError(
            `Cannot read message: "dropped" for call ${message.id}, which was not cancelled`,
          );
        }
        this.#lateAnswer(message.id, true);
        return;
      case "pong":
        if (this.#liveness.answered()) this.#options.events.onLiveness?.(true);
        return;
      case "progress":
        return this.#onProgress(message.id, message.value);
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
        this.#calls.window.ordered(message.concurrency);
      }
      const command = this.#options.command;
      this.#workerPid = command.local
        ? command.workerPid(this.spawnPid)
        : message.pid;
      // The host's pid, which the worker's logs and errors are reported
      // under, written before any call (a handler reads it as this.pid).
      if (command.local && message.version >= PID_MESSAGE_VERSION) {
        this.#writeControl({ type: "pid", id: CONTROL_ID, pid: this.pid });
      }
      // Inside the OS sandbox its processes hold the worker's stdout too.
      if (
        this.#workerPid !== undefined && command.local &&
        command.sandboxes.length > 0
      ) {
        this.#stdoutWatch = watchStdout(
          this.#workerPid,
          () => this.#calls.size > 0,
          () => this.#closedStdout(),
        );
      }
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

  /** A progress report, handed to its call's callback. */
  #onProgress(id: number, value: unknown): void {
    const onProgress = this.#calls.get(id)?.onProgress;
    if (!onProgress) return;
    try {
      onProgress(value);
    } catch {
      // A throwing progress callback must not break the connection.
    }
    clockMayHaveMoved();
  }

  /** A stream's values, handed to its call (dropped once it ended here). */
  #onItems(message: ItemsMessage, payloadBytes: number): void {
    // Values of a call that timed out or was cancelled are dropped.
    const call = this.#calls.get(message.id);
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

  async #watchExit(
    stdoutDone: Promise<void>,
    stderrDone: Promise<void>,
  ): Promise<ConnectionExit> {
    const status = await this.#child.exited;
    live.delete(this.#child);
    unregisterWorker(this);
    // A reply written just before exiting still counts: drain stdout first.
    const drained = await settledWithin(
      Promise.all([stdoutDone, stderrDone]),
      DRAIN_AFTER_EXIT_MS,
    );
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
    this.#stdoutWatch?.stop();
    const { lost, unstarted } = this.#calls.clear(
      drained && !this.#truncated && !this.#protocolError,
    );
    this.#abandoned.gone(command.local ? this.pid : undefined);
    this.#liveness.stop();
    if (!this.#hello) {
      this.#rejectReady(
        startError(
          this.module,
          this.spawnPid,
          exit,
          this.#fatal,
          this.#truncated,
          this.#hints(),
        ),
      );
    }
    if (lost.length > 0) this.#options.events.onLost(lost, exit, unstarted);
    this.#syncRef();
    return exit;
  }
}

/** Whether a promise settles within `ms`. */
async function settledWithin(
  promise: Promise<unknown>,
  ms: number,
): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = await Promise.race([
    promise.then(() => true),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]);
  clearTimeout(timer);
  return settled;
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
