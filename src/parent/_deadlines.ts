/**
 * The deadlines of the calls a connection has written: one shared, unref'd
 * timer armed for the earliest. Private to src/parent.
 *
 * @module
 */

/** What a deadline is kept for: a call with an id and a timeout. */
export interface Timed {
  /** The request id. */
  readonly id: number;
  /** The deadline once written, in ms (greater than 0). */
  readonly timeoutMs: number;
}

/** When a call written to the worker times out. */
interface Deadline<T extends Timed> {
  /** The call. */
  item: T;
  /** When it was written (ms since the epoch). */
  startedAt: number;
  /** When it times out (ms since the epoch). */
  at: number;
}

/**
 * Deadlines by call id. One shared timer serves them all, armed for the
 * earliest: a timer per call cost ~1.6 µs of CPU per call on Deno (a quarter
 * of the parent's work at 64 calls in flight). The timer is unref'd: while
 * calls are pending the connection keeps the child ref'd, so it fires on
 * time. A removed deadline leaves the timer armed; when it fires it finds
 * nothing due.
 */
export class DeadlineQueue<T extends Timed> {
  #entries = new Map<number, Deadline<T>>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #timerAt = Infinity;
  #stopped = false;
  #onDue: (item: T, startedAt: number) => void;

  /**
   * Creates an empty queue.
   *
   * @param onDue Called for each call whose deadline passed, earliest first,
   * after its deadline was removed.
   */
  constructor(onDue: (item: T, startedAt: number) => void) {
    this.#onDue = onDue;
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
    this.#entries.set(item.id, { item, startedAt, at });
    if (at < this.#timerAt) this.#arm(at);
  }

  /**
   * Counts a call's deadline from now again (its write completed). Nothing
   * happens if the call has no deadline here any more.
   *
   * @param item The call.
   */
  restart(item: T): void {
    const deadline = this.#entries.get(item.id);
    if (deadline === undefined || deadline.item !== item) return;
    deadline.startedAt = Date.now();
    deadline.at = deadline.startedAt + item.timeoutMs;
  }

  /**
   * Removes a call's deadline.
   *
   * @param id The call's id.
   */
  /**
   * {@linkcode DeadlineQueue.restart} for several items, with one clock
   * read.
   *
   * @param items The items.
   */
  restartAll(items: readonly T[]): void {
    if (items.length === 0) return;
    const now = Date.now();
    for (const item of items) {
      const deadline = this.#entries.get(item.id);
      if (deadline === undefined || deadline.item !== item) continue;
      deadline.startedAt = now;
      deadline.at = now + item.timeoutMs;
    }
  }

  delete(id: number): void {
    this.#entries.delete(id);
  }

  /** Removes every deadline and the timer; later `add`s are ignored. */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#timerAt = Infinity;
    this.#entries.clear();
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
    const now = Date.now();
    const due: Deadline<T>[] = [];
    let next = Infinity;
    for (const deadline of this.#entries.values()) {
      if (deadline.at <= now) due.push(deadline);
      else if (deadline.at < next) next = deadline.at;
    }
    due.sort((a, b) => a.at - b.at);
    for (const deadline of due) this.#entries.delete(deadline.item.id);
    // Armed before the callbacks run, so one that throws cannot leave the
    // later deadlines without a timer.
    if (next < Infinity && !this.#stopped) this.#arm(next);
    for (const deadline of due) {
      this.#onDue(deadline.item, deadline.startedAt);
    }
  }
}
