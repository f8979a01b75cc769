/**
 * The deadlines of the calls a connection has written: one shared, unref'd
 * timer armed for the earliest. Private to src/parent.
 *
 * @module
 */

/**
 * What a deadline is kept for: a call with an id and a timeout, which holds
 * its own deadline (no entry per call in a map of the queue's).
 */
export interface Timed {
  /** The request id. */
  readonly id: number;
  /** The deadline once written, in ms (greater than 0). */
  readonly timeoutMs: number;
  /** When it times out (ms since the epoch); 0 while it has no deadline here. */
  dueAt: number;
  /** When its deadline started counting (ms since the epoch). */
  dueFrom: number;
}

/**
 * The deadlines of the calls one owner holds (a connection's calls in
 * flight), kept on the calls themselves. One shared timer serves them all,
 * armed for the earliest: a timer per call was a quarter of the parent's
 * work at 64 calls in flight (docs/benchmarks.md, "Figures behind the
 * code"). The timer is
 * unref'd: while calls are pending the connection keeps the child ref'd, so
 * it fires on time. A removed deadline leaves the timer armed; when it fires
 * it finds nothing due. Every call with a deadline here must be among the
 * owner's items (`items`), and a call may have a deadline in one queue at a
 * time.
 */
export class DeadlineQueue<T extends Timed> {
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;
  #stopped = false;
  #onDue: (item: T, startedAt: number) => void;
  #items: () => Iterable<T>;

  /**
   * Creates an empty queue.
   *
   * @param onDue Called for each call whose deadline passed, earliest first,
   * after its deadline was removed.
   * @param items The calls that may have a deadline here (looked through
   * only when the timer fires).
   */
  constructor(
    onDue: (item: T, startedAt: number) => void,
    items: () => Iterable<T>,
  ) {
    this.#onDue = onDue;
    this.#items = items;
  }

  /**
   * Starts the deadline of a call, counted from now.
   *
   * @param item The call.
   */
  add(item: T): void {
    if (this.#stopped) return;
    const startedAt = Date.now();
    const at = startedAt + item.timeoutMs;
    item.dueFrom = startedAt;
    item.dueAt = at;
    if (at < this.#timerAt) this.#arm(at);
  }

  /**
   * Counts the deadlines of calls from now again (their write completed),
   * with one clock read. A call with no deadline here any more is left
   * alone.
   *
   * @param items The calls.
   */
  restartAll(items: readonly T[]): void {
    if (items.length === 0 || this.#stopped) return;
    const now = Date.now();
    for (const item of items) {
      if (item.dueAt === 0) continue;
      item.dueFrom = now;
      item.dueAt = now + item.timeoutMs;
    }
  }

  /**
   * Removes a call's deadline.
   *
   * @param item The call.
   */
  delete(item: T): void {
    item.dueAt = 0;
  }

  /** Removes the timer; later `add`s are ignored. */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
  }

  #arm(at: number): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timerAt = at;
    const timer = setTimeout(() => this.#fire(), Math.max(0, at - Date.now()));
    (timer as { unref?: () => void }).unref?.();
    this.#timer = timer;
  }

  #fire(): void {
    this.#timer = undefined;
    this.#timerAt = Infinity;
    if (this.#stopped) return;
    const now = Date.now();
    const due: { item: T; at: number; from: number }[] = [];
    let next = Infinity;
    for (const item of this.#items()) {
      const at = item.dueAt;
      if (at === 0) continue;
      if (at <= now) due.push({ item, at, from: item.dueFrom });
      else if (at < next) next = at;
    }
    due.sort((a, b) => a.at - b.at);
    for (const { item } of due) item.dueAt = 0;
    // Armed before the callbacks run, so one that throws cannot leave the
    // later deadlines without a timer.
    if (next < Infinity) this.#arm(next);
    for (const { item, from } of due) this.#onDue(item, from);
  }
}
