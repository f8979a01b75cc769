/**
 * A pool's sticky keys (`key` on a call, or the pool's `route`): which live
 * worker each key is bound to, and the placement of queued calls when some
 * carry a key.
 *
 * @module
 */

import type { PendingCall } from "./_call.ts";
import type { CallKey, CallOptions, ResolvedPoolOptions } from "./options.ts";
import { checkKey } from "./_resolve_options.ts";
import { type CallHandle, refusedCall } from "./_stream.ts";
import type { PoolWorker } from "./_pool_worker.ts";

/** What keyed placement asks of the pool. */
export interface Placement {
  /** The least busy worker with room, writing ahead if `ahead`. */
  leastBusy(ahead: boolean): PoolWorker | undefined;
  /** Whether a key's own worker takes its call now (written ahead or not). */
  ownerHasRoom(owner: PoolWorker): boolean;
  /** Sends a call to a worker. */
  dispatch(worker: PoolWorker, call: PendingCall): void;
}

/** The keys of one pool. */
export class StickyKeys {
  /** Which live worker each sticky key is bound to. */
  readonly #owner = new Map<CallKey, PoolWorker>();
  /** Admitted keyed calls not yet settled: 0 keeps the plain FIFO path. */
  #unsettled = 0;

  /** Keys bound to a live worker. */
  get size(): number {
    return this.#owner.size;
  }

  /** Whether a keyed call is admitted and not settled yet. */
  get active(): boolean {
    return this.#unsettled > 0;
  }

  /** Counts an admitted call with a key until it settles. */
  admitted(call: PendingCall): void {
    if (call.key === undefined) return;
    this.#unsettled++;
    const done = () => void this.#unsettled--;
    call.promise.then(done, done);
  }

  /** Frees a leaving worker's keys: their next calls bind anew. */
  unbind(worker: PoolWorker): void {
    for (const key of worker.keys) {
      if (this.#owner.get(key) === worker) this.#owner.delete(key);
    }
    worker.keys.clear();
  }

  /**
   * Places queued calls when some carry a sticky key: a bound key's call
   * runs on its worker or waits for it (later calls pass it), an unbound
   * key binds to the least busy worker, a call without a key takes any.
   * Calls of one key keep their order.
   *
   * @param queue The pool's queue; placed and settled calls leave it.
   * @param ahead Whether calls may be written ahead to busy workers.
   * @param place The pool's placement.
   * @returns How many queued calls could run on any worker (unkeyed, or
   *   with a key not bound yet).
   */
  place(queue: PendingCall[], ahead: boolean, place: Placement): number {
    let index = 0;
    while (index < queue.length) {
      const call = queue[index] as PendingCall;
      if (call.settled) {
        queue.splice(index, 1);
        continue;
      }
      const free = place.leastBusy(ahead);
      let target: PoolWorker | undefined = free;
      if (call.key !== undefined) {
        // A key's calls may always be written ahead to its own worker: they
        // cannot run elsewhere.
        const owner = this.#owner.get(call.key);
        if (owner) target = place.ownerHasRoom(owner) ? owner : undefined;
        else if (free) {
          this.#owner.set(call.key, free);
          free.keys.add(call.key);
        }
      }
      if (!target) {
        index++;
        continue;
      }
      queue.splice(index, 1);
      place.dispatch(target, call);
    }
    let placeable = 0;
    for (const call of queue) {
      if (call.key === undefined || !this.#owner.has(call.key)) placeable++;
    }
    return placeable;
  }
}

/** A pool's `call` and `stream` entries, with the `route(op, args)` key added. */
export function routedEntries(
  core: {
    call(op: string, args: unknown[], options?: CallOptions): Promise<unknown>;
    handle(op: string, args: unknown[], options?: CallOptions): CallHandle;
  },
  route: ResolvedPoolOptions["route"],
): {
  call: (
    op: string,
    args: unknown[],
    options?: CallOptions,
  ) => Promise<unknown>;
  handleOf: (op: string, args: unknown[], options?: CallOptions) => CallHandle;
} {
  const call = (
    op: string,
    args: unknown[],
    callOptions?: CallOptions,
  ): Promise<unknown> => {
    try {
      callOptions = routed(route, op, args, callOptions);
    } catch (error: unknown) {
      return Promise.reject(error);
    }
    return core.call(op, args, callOptions);
  };
  const handleOf = (
    op: string,
    args: unknown[],
    callOptions?: CallOptions,
  ): CallHandle => {
    try {
      callOptions = routed(route, op, args, callOptions);
    } catch (error: unknown) {
      return refusedCall(op, error);
    }
    return core.handle(op, args, callOptions);
  };
  return { call, handleOf };
}

/**
 * A call's options with the pool's `route(op, args)` key added, when it has
 * no key of its own.
 *
 * @throws {TypeError} when `route` returns something that is not a key.
 */
function routed(
  route: ResolvedPoolOptions["route"],
  op: string,
  args: unknown[],
  callOptions: CallOptions | undefined,
): CallOptions | undefined {
  if (!route || callOptions?.key !== undefined) return callOptions;
  const key: CallKey | undefined = checkKey(
    route(op, args ?? []),
    "route(op, args)",
  );
  return key === undefined ? callOptions : { ...callOptions, key };
}
