/**
 * The calls one connection has written and not seen answered: the table by
 * request id, their deadlines, the write-ahead window, and the writes the
 * deadlines count from. Bookkeeping only: the connection does the I/O.
 * Private to src/parent.
 *
 * @module
 */

import type { CallRecord } from "./_call.ts";
import { DeadlineQueue } from "./_deadlines.ts";
import { WriteAheadWindow } from "./_write_ahead.ts";

/** What a connection's worker lost with it. */
export interface LostCalls {
  /** The calls in flight, in the order written. */
  readonly lost: CallRecord[];
  /** Those the worker is known never to have started. */
  readonly unstarted: Set<CallRecord>;
}

/** The calls in flight on one connection. */
export class CallTable {
  /** The calls written and not answered, by request id. */
  #calls = new Map<number, CallRecord>();
  /** Their deadlines. */
  #deadlines: DeadlineQueue<CallRecord>;
  /** Which written calls wait in the worker's queue, and which never started. */
  #window = new WriteAheadWindow<CallRecord>();
  /** Told when a call written ahead starts. */
  #onStarted: (call: CallRecord) => void;
  /** The write the last call went into, while it is in progress. */
  #written: Promise<void> | undefined;
  /** The calls with a deadline in that write. */
  #writtenCalls: CallRecord[] = [];
  /** A call written ahead starts: its deadline starts now. */
  #start = (call: CallRecord): void => {
    call.mayHaveRun = true;
    if (call.timeoutMs > 0) this.#deadlines.add(call);
    this.#onStarted(call);
  };

  /** Whether a call is still in flight here (not answered, not abandoned). */
  #inFlightHere = (call: CallRecord): boolean =>
    this.#calls.get(call.id) === call;

  /**
   * Creates an empty table.
   *
   * @param onDue Called for a call whose deadline passed (removed first).
   * @param onStarted Called when a call written ahead starts.
   */
  constructor(
    onDue: (call: CallRecord, startedAt: number) => void,
    onStarted: (call: CallRecord) => void,
  ) {
    this.#deadlines = new DeadlineQueue<CallRecord>(
      onDue,
      () => this.#calls.values(),
    );
    this.#onStarted = onStarted;
  }

  /** Calls written and not answered. */
  get size(): number {
    return this.#calls.size;
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
   * The call in flight with this id.
   *
   * @param id The request id.
   * @returns The call, or `undefined` when none is.
   */
  get(id: number): CallRecord | undefined {
    return this.#calls.get(id);
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
   * A call was answered: it leaves the table, and calls written ahead may
   * start.
   *
   * @param call The call (in flight here).
   */
  answered(call: CallRecord): void {
    this.#calls.delete(call.id);
    this.#deadlines.delete(call);
    this.#promote();
  }

  /**
   * A call was abandoned (cancelled, timed out): it leaves the table.
   *
   * @param call The call (in flight here).
   */
  abandoned(call: CallRecord): void {
    this.#calls.delete(call.id);
    this.#deadlines.delete(call);
    if (!this.#window.abandoned(call)) this.#promote();
  }

  /**
   * Holds a streaming call's deadline while its values wait for the
   * consumer, or counts it again.
   *
   * @param id The request id.
   * @param held Whether to hold it.
   */
  holdDeadline(id: number, held: boolean): void {
    const call = this.#calls.get(id);
    if (!call || call.timeoutMs <= 0) return;
    if (held) this.#deadlines.delete(call);
    else this.#deadlines.add(call);
  }

  /**
   * The worker is gone: empties the table and stops the deadlines.
   *
   * @param complete Whether every answer it wrote was read.
   * @returns The calls lost, and those it never started.
   */
  clear(complete: boolean): LostCalls {
    this.#deadlines.stop();
    const lost = [...this.#calls.values()];
    this.#calls.clear();
    const unstarted = this.#window.unstarted(lost, complete);
    // Not known to be unstarted: it may have run (a call written ahead may
    // have started before the answer that let it start was read).
    for (const call of lost) {
      if (!unstarted.has(call)) call.mayHaveRun = true;
    }
    return { lost, unstarted };
  }

  /** Starts the calls written ahead that freed slots let start. */
  #promote(): void {
    if (this.#window.waiting === 0) return;
    this.#window.promote(this.#calls.size, this.#inFlightHere, this.#start);
  }
}
