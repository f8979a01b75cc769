/**
 * One live worker process: spawn, the worker's messages routed, refs kept,
 * and exit diagnostics. Sessions, one-shot calls and pools are built from
 * these. Its parts: the handshake (`_handshake.ts`), the calls and their
 * deadlines (`_call_table.ts`), reading stdout (`_stdout_pump.ts`,
 * `_stdout_watch.ts`), ending the process (`_stop.ts`).
 *
 * @module
 */

import { ProtocolError, WorkerStartError } from "../errors.ts";
import {
  CONTROL_ID,
  type HelloMessage,
  LIMIT_MESSAGE_VERSION,
  type Message,
  PID_MESSAGE_VERSION,
} from "../protocol/messages.ts";
import { encodeMessage } from "../protocol/encode_message.ts";
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
import { type CallEvents, CallTable } from "./_call_table.ts";
import { Occupancy, type OccupancyEvents } from "./_occupancy.ts";
import { type DecodedMessage, StdoutPump } from "./_stdout_pump.ts";
import {
  afterStdoutEnd,
  type StdoutWatch,
  watchStdout,
} from "./_stdout_watch.ts";
import { hintContext } from "./_answer.ts";
import { type ConnectionExit, exitReason, type Truncation } from "./_exit.ts";
import { Handshake } from "./_handshake.ts";
import { escalate, gone, killAtExit, settledWithin } from "./_stop.ts";
import { WorkerLog } from "./_log.ts";
import type { LogSink } from "./_log_sink.ts";
import { registerWorker, unregisterWorker } from "./_registry.ts";
import { answerDelayMs } from "./_faults.ts";

/** How long to keep reading stdout after the process exited. */
const DRAIN_AFTER_EXIT_MS = 1_000;

/** What a connection tells its owner. */
export interface ConnectionEvents extends CallEvents, OccupancyEvents {
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
  /** The hello, the start deadline and the start error. */
  #handshake: Handshake;
  /** The calls written and not answered, and those abandoned. */
  #calls: CallTable;
  /** Freed slots and idle waiters, told to the owner. */
  #occupancy: Occupancy;
  #log: WorkerLog;
  #killReason: string | undefined;
  /** Whether the owner asked for the exit (no crash to report). */
  #requested = false;
  #shutdownWritten = false;
  #protocolError: ProtocolError | undefined;
  #truncated: Truncation | undefined;
  #exit: ConnectionExit | undefined;
  #stdout: StdoutPump;
  #stdoutCancelled = false;
  /** Whether a sandboxed worker still holds its stdout, while checked. */
  #stdoutWatch: StdoutWatch | undefined;

  /** @internal Use {@linkcode startConnection}. */
  constructor(options: ConnectionOptions, child: ChildHandle) {
    this.#options = options;
    this.#child = child;
    this.module = options.command.module;
    this.spawnPid = child.pid;
    this.startedAt = Date.now();
    const sandboxed = options.command.sandboxes.length > 0;
    this.#calls = new CallTable({
      module: this.module,
      cancelGraceMs: options.cancelGraceMs,
      events: options.events,
      pid: () => this.pid,
      hints: () => hintContext(options.grants, sandboxed, options.adapter),
      version: () => this.#hello?.version ?? 0,
      alive: () => this.alive,
      write: (message) => {
        if (!this.#exit) this.#writeControl(message);
      },
      kill: (reason) => this.kill(reason),
      changed: () => this.#syncRef(),
    });
    this.#occupancy = new Occupancy(options.events);
    this.#log = new WorkerLog(options.onLog, () => ({
      module: this.module,
      pid: this.pid,
    }));
    this.#handshake = new Handshake({
      module: this.module,
      spawnPid: this.spawnPid,
      startTimeoutMs: options.startTimeoutMs,
      began: options.startBegan ?? this.startedAt,
      spawnedAt: this.startedAt,
    }, () => this.kill("not ready before startTimeoutMs"));
    this.ready = this.#handshake.ready;
    killAtExit(child, options.adapter);
    registerWorker(this, options.command.local);
    this.#stdout = new StdoutPump(child.stdout, options.maxFrameBytes, {
      message: (message, bytes) => this.#onFrame(message, bytes),
      stray: (bytes) => this.#log.stray(bytes),
    });
    const stdoutDone = this.#pumpStdout();
    const stderrDone = this.#log.pumpStderr(child.stderr);
    this.closed = this.#watchExit(stdoutDone, stderrDone);
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
    return this.#calls.size + this.#calls.running;
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

  /** Whether a call in flight streams: nothing should be written ahead behind it. */
  get streaming(): boolean {
    return this.#calls.streaming;
  }

  /**
   * Whether a liveness check is in progress (a call timed out, the worker
   * has not answered the ping yet): nothing new should be written to it.
   */
  get checking(): boolean {
    return this.#calls.checking;
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
    return this.#calls.cancel(call, reason);
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
    await escalate(this.#child, this.closed, graceMs, () => {
      this.#killReason ??= `did not exit within ${graceMs} ms of shutdown`;
    });
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

  #syncRef(): void {
    const inFlight = this.#calls.size;
    const running = this.#calls.running;
    this.#occupancy.update(inFlight, running);
    if (this.#exit) return;
    this.#child.setRef(
      inFlight > 0 || running > 0 || !this.#hello || this.#requested ||
        this.#killReason !== undefined,
    );
  }

  async #pumpStdout(): Promise<void> {
    const stdout = this.#stdout;
    try {
      while (true) {
        const { done, value, inPlace } = await stdout.read();
        if (done || value === undefined) break;
        stdout.push(value, inPlace);
      }
      this.#truncated = stdout.end();
      this.#log.endStray();
      if (this.#exit === undefined) {
        afterStdoutEnd(
          this.closed,
          () => this.#exit === undefined,
          () => this.#closedStdout(),
        );
      }
    } catch (error: unknown) {
      this.#stdoutFailed(error);
    }
  }

  /** Reading stdout threw: a protocol error, or the pipe failed. */
  #stdoutFailed(error: unknown): void {
    if (error instanceof ProtocolError) {
      this.#protocolError = new ProtocolError(error.message, {
        module: this.module,
        cause: error,
      });
      this.kill(`killed by airlock after a protocol error: ${error.message}`);
      this.#stdout.cancel();
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

  /** A message from the worker, held back by the test kit's delay if set. */
  #onFrame(message: DecodedMessage, bytes: number): void {
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
  }

  /** The worker closed its stdout and kept running: it can never answer. */
  #closedStdout(): void {
    this.#log.note("the worker closed its stdout");
    this.kill(
      "killed by airlock because it closed its stdout and kept running (it could never answer)",
    );
  }

  #onMessage(message: DecodedMessage, payloadBytes: number): void {
    if (!this.#hello) return this.#beforeHello(message);
    switch (message.type) {
      case "result":
      case "error":
      case "end":
        return this.#calls.answer(message);
      case "items":
        return this.#calls.items(message, payloadBytes);
      case "dropped":
        return this.#calls.dropped(message.id);
      case "pong":
        return this.#calls.pong();
      case "progress":
        return this.#calls.progress(message.id, message.value);
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
  #beforeHello(message: DecodedMessage): void {
    const hello = this.#handshake.receive(message);
    if (hello === undefined) return;
    this.#hello = hello;
    // A worker of version 3 starts queued calls in arrival order.
    if (hello.version >= LIMIT_MESSAGE_VERSION) {
      this.#calls.window.ordered(hello.concurrency);
    }
    const command = this.#options.command;
    const workerPid = command.local
      ? command.workerPid(this.spawnPid)
      : hello.pid;
    this.#workerPid = workerPid;
    // The host's pid, which the worker's logs and errors are reported
    // under, written before any call (a handler reads it as this.pid).
    if (command.local && hello.version >= PID_MESSAGE_VERSION) {
      this.#writeControl({ type: "pid", id: CONTROL_ID, pid: this.pid });
    }
    // Inside the OS sandbox its processes hold the worker's stdout too.
    if (
      workerPid !== undefined && command.local && command.sandboxes.length > 0
    ) {
      this.#stdoutWatch = watchStdout(
        workerPid,
        () => this.#calls.size > 0,
        () => this.#closedStdout(),
      );
    }
    this.#syncRef();
    this.#handshake.done();
  }

  async #watchExit(
    stdoutDone: Promise<void>,
    stderrDone: Promise<void>,
  ): Promise<ConnectionExit> {
    const status = await this.#child.exited;
    gone(this.#child);
    unregisterWorker(this);
    // A reply written just before exiting still counts: drain stdout first.
    const drained = await settledWithin(
      Promise.all([stdoutDone, stderrDone]),
      DRAIN_AFTER_EXIT_MS,
    );
    if (!drained) {
      this.#stdoutCancelled = true;
      this.#stdout.cancel();
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
      command.local ? this.pid : undefined,
    );
    if (!this.#hello) {
      const sandboxed = command.sandboxes.length > 0;
      const { grants, adapter } = this.#options;
      this.#handshake.failed(
        exit,
        this.#truncated,
        hintContext(grants, sandboxed, adapter),
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
