/**
 * The calls of one connection: the table of those written and not seen
 * answered, by request id, with their deadlines and the write-ahead window,
 * and what happens to each: answered, streamed, abandoned (cancelled, timed
 * out, refused), lost with the worker. The connection does the I/O and the
 * process; this holds the calls. Private to src/parent.
 *
 * @module
 */

import { ProtocolError, WorkerTimeoutError } from "../errors.ts";
import {
  CONTROL_ID,
  type EndMessage,
  type ErrorMessage,
  type ItemsMessage,
  LIVENESS_MESSAGE_VERSION,
  type Message,
  type ResultMessage,
} from "../protocol/messages.ts";
import type { CallRecord } from "./_call.ts";
import { AbandonedCalls } from "./_abandoned.ts";
import { type AnsweringWorker, settleWithAnswer } from "./_answer.ts";
import { DeadlineQueue } from "./_deadlines.ts";
import { LIVENESS_GRACE_MS, LivenessCheck } from "./_liveness.ts";
import { clockMayHaveMoved } from "./_metrics.ts";
import { type StreamCarrier, streamOf } from "./_stream.ts";
import { WriteAheadWindow } from "./_write_ahead.ts";

/** What the calls of a connection tell its owner. */
export interface CallEvents {
  /** A call passed its deadline and was rejected. */
  onTimeout(call: CallRecord): void;
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

/** What the calls need of their connection. */
export interface CallHost extends AnsweringWorker {
  /** How long an abandoned call may keep running before the worker is killed. */
  readonly cancelGraceMs: number;
  /** Where events go. */
  readonly events: CallEvents;
  /** The hello's message version (0 before the hello). */
  version(): number;
  /** Whether the worker runs and is not being killed. */
  alive(): boolean;
  /** Writes a control message, unless the worker is gone. */
  write(message: Message): void;
  /** Kills the worker, saying why. */
  kill(reason: string): void;
  /** Calls in flight or still running changed (refs, slot events). */
  changed(): void;
}

/** What a connection's worker lost with it. */
export interface LostCalls {
  /** The calls in flight, in the order written. */
  readonly lost: CallRecord[];
  /** Those the worker is known never to have started. */
  readonly unstarted: Set<CallRecord>;
}

/** The calls of one connection. */
export class CallTable implements StreamCarrier {
  #host: CallHost;
  /** The calls written and not answered, by request id. */
  #calls = new Map<number, CallRecord>();
  /** Their deadlines. */
  #deadlines: DeadlineQueue<CallRecord>;
  /** Which written calls wait in the worker's queue, and which never started. */
  #window = new WriteAheadWindow<CallRecord>();
  /** Abandoned calls the worker may still run. */
  #abandoned = new AbandonedCalls();
  /** The liveness check after a timeout. */
  #liveness = new LivenessCheck();
  /** Timeouts since the last answer: two in a row end the worker. */
  #consecutiveTimeouts = 0;
  /** The write the last call went into, while it is in progress. */
  #written: Promise<void> | undefined;
  /** The calls with a deadline in that write. */
  #writtenCalls: CallRecord[] = [];
  /** A call written ahead starts: its deadline starts now. */
  #start = (call: CallRecord): void => {
    call.mayHaveRun = true;
    if (call.timeoutMs > 0) this.#deadlines.add(call);
    this.#host.events.onStarted?.(call);
  };
  /** Whether a call is still in flight here (not answered, not abandoned). */
  #inFlightHere = (call: CallRecord): boolean =>
    this.#calls.get(call.id) === call;

  /**
   * Creates an empty table.
   *
   * @param host The connection.
   */
  constructor(host: CallHost) {
    this.#host = host;
    this.#deadlines = new DeadlineQueue<CallRecord>(
      (call, startedAt) => this.#timeout(call, startedAt),
      () => this.#calls.values(),
    );
  }

  /** Calls written and not answered. */
  get size(): number {
    return this.#calls.size;
  }

  /** Abandoned calls whose handlers may still run in the worker. */
  get running(): number {
    return this.#abandoned.running;
  }

  /** Whether a liveness check is in progress. */
  get checking(): boolean {
    return this.#liveness.active;
  }

  /** The write-ahead window (slots, ordering, limits). */
  get window(): WriteAheadWindow<CallRecord> {
    return this.#window;
  }

  /**
   * Whether a call in flight is a stream that has sent values (it may hold
   * its slot for long).
   */
  get streaming(): boolean {
    for (const call of this.#calls.values()) {
      if (call.stream !== undefined) return true;
    }
    return false;
  }

  /**
   * Whether this very call is in flight here.
   *
   * @param call The call.
   * @returns Whether it is.
   */
  has(call: CallRecord): boolean {
    return this.#calls.get(call.id) === call;
  }

  /**
   * Records a call about to be written.
   *
   * @param call The call.
   * @returns Whether it starts now; `false` when it is written ahead.
   */
  add(call: CallRecord): boolean {
    call.attempts++;
    this.#calls.set(call.id, call);
    // A deadline it had in an earlier connection is not one here.
    call.dueAt = 0;
    // Written ahead, it waits in the worker's queue, its deadline with it.
    if (this.#window.written(call, this.#calls.size)) return false;
    call.mayHaveRun = true;
    // The deadline counts from when the call is written. Until the write
    // completes it also counts from now, so a worker that stopped reading
    // its stdin (a full pipe) cannot hold the call forever.
    if (call.timeoutMs > 0) this.#deadlines.add(call);
    return true;
  }

  /**
   * Notes the write a call went into: its deadline counts again from when
   * that write completes.
   *
   * @param call The call.
   * @param written The write's promise.
   */
  wrote(call: CallRecord, written: Promise<void>): void {
    // Frames sent in one turn share one write (and its promise): one
    // handler per write, not per call, restarts their deadlines (a call
    // written ahead has none until it is promoted: restarting it is a no-op).
    if (written === this.#written) {
      if (call.timeoutMs > 0) this.#writtenCalls.push(call);
      return;
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
  }

  /**
   * The worker answered a call (`result`, `error` or `end`): it settles, and
   * calls written ahead may start. An answer to a call abandoned here says
   * its handler stopped.
   *
   * @param message The answer.
   */
  answer(message: ResultMessage | ErrorMessage | EndMessage): void {
    const call = this.#calls.get(message.id);
    if (!call) {
      // Late answer to a call that timed out or was cancelled: dropped.
      this.#lateAnswer(message.id, false);
      return;
    }
    this.#calls.delete(message.id);
    try {
      this.#deadlines.delete(call);
      this.#promote();
      this.#consecutiveTimeouts = 0;
      this.#host.changed();
    } finally {
      // Out of the table, the call settles here or never.
      settleWithAnswer(call, message, this.#host);
    }
  }

  /**
   * The worker dropped an abandoned call before it started (`dropped`).
   *
   * @param id The request id.
   * @throws {ProtocolError} when the call was not abandoned.
   */
  dropped(id: number): void {
    if (this.#calls.has(id)) {
      throw new ProtocolError(
        `Cannot read message: "dropped" for call ${id}, which was not cancelled`,
      );
    }
    this.#lateAnswer(id, true);
  }

  /**
   * A stream's values, handed to its call (dropped once it ended here).
   *
   * @param message The values.
   * @param payloadBytes The frame's payload size.
   * @throws {ProtocolError} for a call that must be answered with a value,
   *   or values past the call's window.
   */
  items(message: ItemsMessage, payloadBytes: number): void {
    // Values of a call that timed out or was cancelled are dropped.
    const call = this.#calls.get(message.id);
    if (!call) return;
    if (call.plain) {
      throw new ProtocolError(
        `Cannot read message: "items" for call "${call.op}" (id ${call.id}), which must be answered with a value`,
      );
    }
    const refused = streamOf(call).receive(message.values, payloadBytes, this);
    if (refused !== undefined) {
      this.#abandon(
        call,
        new ProtocolError(refused.message, { module: this.#host.module }),
        "refused",
      );
    }
  }

  /**
   * A progress report, handed to its call's callback.
   *
   * @param id The request id.
   * @param value What the handler reported.
   */
  progress(id: number, value: unknown): void {
    const onProgress = this.#calls.get(id)?.onProgress;
    if (!onProgress) return;
    try {
      onProgress(value);
    } catch {
      // A throwing progress callback must not break the connection.
    }
    clockMayHaveMoved();
  }

  /** The worker answered the liveness check (`pong`). */
  pong(): void {
    if (this.#liveness.answered()) this.#host.events.onLiveness?.(true);
  }

  /**
   * Abandons a call in flight: rejects it with `reason`, tells the worker to
   * abort it, and kills the worker if the handler has not finished after the
   * grace period.
   *
   * @param call The call.
   * @param reason What the call rejects with.
   * @returns Whether the call was in flight here.
   */
  cancel(call: CallRecord, reason: unknown): boolean {
    if (this.#calls.get(call.id) !== call) return false;
    this.#abandon(call, reason, "cancelled");
    return true;
  }

  /**
   * Writes a `credit` for a stream's values the consumer took.
   *
   * @param id The call.
   * @param items Values consumed since the last credit.
   * @param bytes Payload bytes released since the last credit.
   */
  credit(id: number, items: number, bytes: number): void {
    if (!this.#calls.has(id)) return;
    this.#host.write({ type: "credit", id, items, bytes });
  }

  /**
   * Holds a streaming call's deadline while its values wait for the
   * consumer, or counts it again.
   *
   * @param id The call.
   * @param held Whether unconsumed values are held.
   */
  holdDeadline(id: number, held: boolean): void {
    const call = this.#calls.get(id);
    if (!call || call.timeoutMs <= 0) return;
    if (held) this.#deadlines.delete(call);
    else this.#deadlines.add(call);
  }

  /**
   * The worker is gone: empties the table, stops the deadlines and timers.
   *
   * @param complete Whether every answer it wrote was read.
   * @param pid The worker's own process when it runs on this machine
   *   (calls settled once stopped wait for it to be gone).
   * @returns The calls lost, and those it never started.
   */
  clear(complete: boolean, pid: number | undefined): LostCalls {
    this.#deadlines.stop();
    const lost = [...this.#calls.values()];
    this.#calls.clear();
    const unstarted = this.#window.unstarted(lost, complete);
    // Not known to be unstarted: it may have run (a call written ahead may
    // have started before the answer that let it start was read).
    for (const call of lost) {
      if (!unstarted.has(call)) call.mayHaveRun = true;
    }
    this.#abandoned.gone(pid);
    this.#liveness.stop();
    return { lost, unstarted };
  }

  /** Starts the calls written ahead that freed slots let start. */
  #promote(): void {
    if (this.#window.waiting === 0) return;
    this.#window.promote(this.#calls.size, this.#inFlightHere, this.#start);
  }

  #timeout(call: CallRecord, startedAt: number): void {
    if (this.#calls.get(call.id) !== call) return;
    const host = this.#host;
    this.#consecutiveTimeouts++;
    this.#abandon(
      call,
      new WorkerTimeoutError({
        module: host.module,
        op: call.op,
        pid: host.pid(),
        timeoutMs: call.timeoutMs,
        elapsedMs: Date.now() - startedAt,
        phase: "call",
      }),
      "timed out",
    );
    if (this.#consecutiveTimeouts >= 2) {
      host.kill(
        `killed by airlock because call "${call.op}" (id ${call.id}) timed out twice in a row`,
      );
    } else {
      this.#checkLiveness(call);
    }
    host.events.onTimeout(call);
  }

  /** Asks a worker of message version 4 whether its event loop turns. */
  #checkLiveness(call: CallRecord): void {
    const host = this.#host;
    if (!host.alive() || host.version() < LIVENESS_MESSAGE_VERSION) return;
    const begun = this.#liveness.begin(() => {
      host.kill(
        `killed by airlock because it did not answer a liveness check within ${LIVENESS_GRACE_MS} ms after call "${call.op}" (id ${call.id}) timed out: its event loop is blocked (a handler stuck in synchronous code?)`,
      );
      host.events.onLiveness?.(false);
    });
    if (begun) host.write({ type: "ping", id: CONTROL_ID });
  }

  #abandon(call: CallRecord, reason: unknown, what: string): void {
    this.#calls.delete(call.id);
    this.#deadlines.delete(call);
    if (!this.#window.abandoned(call)) this.#promote();
    const host = this.#host;
    const grace = host.cancelGraceMs;
    this.#abandoned.hold(call, grace, () => {
      host.kill(
        `killed by airlock because ${what} call "${call.op}" (id ${call.id}) did not stop within ${grace} ms`,
      );
    });
    host.changed();
    this.#abandoned.settle(call, reason);
    host.write({ type: "cancel", id: call.id });
  }

  /** The answer to a call abandoned here: its handler has stopped. */
  #lateAnswer(id: number, dropped: boolean): void {
    this.#window.answered(id);
    if (this.#abandoned.release(id)) this.#host.changed();
    const ranToEnd = this.#host.version() >= LIVENESS_MESSAGE_VERSION;
    this.#abandoned.stopped(id, dropped, ranToEnd);
  }
}
