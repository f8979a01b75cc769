/**
 * The write-ahead window of one worker connection: which written calls wait
 * in the worker's queue (written ahead of its free slots, their deadlines
 * held until they start), which start as slots free up, and, when the
 * worker dies, which of the lost calls it can never have started (retry
 * safety rests on that). Pure bookkeeping: no I/O, no timers. Private to
 * src/parent. See docs/PROTOCOL.md, "Calls written ahead".
 *
 * @module
 */

/** What the window needs of a call record. */
export interface WindowCall {
  /** The request id. */
  readonly id: number;
  /** Its place in the order calls were written to the connection (set here). */
  writtenSeq: number;
}

/**
 * The write-ahead window. A worker of message version 3 starts queued calls
 * in the order written, a queued one only once an answer before it is out:
 * of the calls written and not answered, only the first `slots` can have
 * started.
 *
 * @typeParam C The call record.
 */
export class WriteAheadWindow<C extends WindowCall> {
  /**
   * Calls the worker runs at once, when it starts queued calls in arrival
   * order: its hello's `concurrency`, or less after {@linkcode limit}. `0`:
   * unknown, any call written may have started.
   */
  #slots = 0;
  /** Whether calls written beyond `#slots` wait (set by {@linkcode limit}). */
  #holdAhead = false;
  /** Calls written ahead (waiting in the worker's queue), in order. */
  #ahead: C[] = [];
  /**
   * When each call abandoned (cancelled or timed out, perhaps still running)
   * and not answered yet was written (its `writtenSeq`), by id.
   */
  #abandonedAt = new Map<number, number>();
  /** Calls written so far: the next `writtenSeq`. */
  #writes = 0;

  /** Calls the worker runs at once (0: unknown). */
  get slots(): number {
    return this.#slots;
  }

  /** Calls written ahead and not started yet. */
  get waiting(): number {
    return this.#ahead.length;
  }

  /**
   * The worker starts queued calls in the order written, `concurrency` at
   * once (its hello said message version 3 or later).
   *
   * @param concurrency Its calls at once.
   */
  ordered(concurrency: number): void {
    this.#slots = concurrency;
  }

  /**
   * The parent limited the worker to `concurrency` calls at once: calls
   * written beyond that wait in its queue.
   *
   * @param concurrency The limit (at most the worker's own).
   */
  limit(concurrency: number): void {
    this.#slots = concurrency;
    this.#holdAhead = true;
  }

  /**
   * Records a call written to the worker.
   *
   * @param call The call.
   * @param inFlight Calls in flight on the connection, this one included.
   * @returns Whether it is written ahead: it waits in the worker's queue.
   */
  written(call: C, inFlight: number): boolean {
    call.writtenSeq = this.#writes++;
    const ahead = this.#holdAhead &&
      inFlight - this.#ahead.length > this.#slots;
    if (ahead) this.#ahead.push(call);
    return ahead;
  }

  /**
   * Starts the calls written ahead that a freed slot lets start, in order.
   * (A cancelled call may still hold its slot for a moment: the next one
   * then starts early in the parent's view, never late.)
   *
   * @param inFlight Calls in flight on the connection now.
   * @param isInFlight Whether a call is still in flight (an answered or
   *   abandoned one is skipped).
   * @param start Told of each call that starts.
   */
  promote(
    inFlight: number,
    isInFlight: (call: C) => boolean,
    start: (call: C) => void,
  ): void {
    while (
      this.#ahead.length > 0 && inFlight - this.#ahead.length < this.#slots
    ) {
      const call = this.#ahead.shift() as C;
      if (isInFlight(call)) start(call);
    }
  }

  /**
   * A call is abandoned (cancelled or timed out): it may hold its slot
   * until answered.
   *
   * @param call The call.
   * @returns Whether it was still written ahead (it had not started).
   */
  abandoned(call: C): boolean {
    if (this.#slots > 0) this.#abandonedAt.set(call.id, call.writtenSeq);
    const index = this.#ahead.indexOf(call);
    if (index === -1) return false;
    this.#ahead.splice(index, 1);
    return true;
  }

  /**
   * An abandoned call was answered: it holds no slot any more.
   *
   * @param id Its request id.
   */
  answered(id: number): void {
    this.#abandonedAt.delete(id);
  }

  /**
   * The lost calls the worker never started: of the calls not answered (the
   * lost ones, and abandoned ones it may still have run), in the order
   * written, all but the first `slots`. That holds only if every answer it
   * wrote was read. Clears the window (the worker is gone).
   *
   * @param lost The calls lost, in the order written.
   * @param complete Whether every answer was read (drained, no cut frame,
   *   no protocol error).
   * @returns Those never started.
   */
  unstarted(lost: readonly C[], complete: boolean): Set<C> {
    const unstarted = new Set<C>();
    const slots = this.#slots;
    const abandoned = [...this.#abandonedAt.values()];
    this.#ahead = [];
    this.#abandonedAt.clear();
    if (slots === 0 || !complete) return unstarted;
    const unanswered: { seq: number; call: C | undefined }[] = [];
    for (const call of lost) unanswered.push({ seq: call.writtenSeq, call });
    for (const seq of abandoned) unanswered.push({ seq, call: undefined });
    unanswered.sort((a, b) => a.seq - b.seq);
    for (let index = slots; index < unanswered.length; index++) {
      const call = unanswered[index]?.call;
      if (call) unstarted.add(call);
    }
    return unstarted;
  }
}
