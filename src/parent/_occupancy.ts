/**
 * How busy one connection's worker is, told to its owner: a freed slot
 * once per turn however many answers a read brought, and waiters for the
 * moment no call is in flight. Private to src/parent.
 *
 * @module
 */

/** What the owner is told of. */
export interface OccupancyEvents {
  /** The worker finished something it was running (occupancy went down). */
  onSlotFree?(): void;
}

/** The occupancy of one connection. */
export class Occupancy {
  #events: OccupancyEvents;
  /** Occupancy at the last update. */
  #last = 0;
  /** Whether a slot-free event is queued for this turn. */
  #queued = false;
  /** Told once no call is in flight. */
  #idleWaiters: (() => void)[] = [];
  #slotFree = (): void => {
    this.#queued = false;
    this.#events.onSlotFree?.();
  };

  /**
   * Creates it with nothing in flight.
   *
   * @param events Where a freed slot is told.
   */
  constructor(events: OccupancyEvents) {
    this.#events = events;
  }

  /**
   * Takes the connection's counts after a change.
   *
   * @param inFlight Calls written and not answered.
   * @param running Abandoned calls the worker may still run.
   */
  update(inFlight: number, running: number): void {
    const occupancy = inFlight + running;
    const freed = occupancy < this.#last;
    this.#last = occupancy;
    if (freed && !this.#queued) {
      this.#queued = true;
      queueMicrotask(this.#slotFree);
    }
    if (inFlight === 0 && this.#idleWaiters.length > 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  /**
   * Settles once no call is in flight.
   *
   * @param inFlight Calls in flight now.
   * @returns A promise.
   */
  idle(inFlight: number): Promise<void> {
    if (inFlight === 0) return Promise.resolve();
    return new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
  }
}
