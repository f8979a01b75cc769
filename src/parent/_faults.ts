/**
 * Fault injection state for the test kit (`@airlock/airlock/testing`): per
 * session or pool, starts to fail and a delay for the answers of its workers.
 * The parent code consults it with a cheap check (one counter) and nothing
 * else happens while no fault is set. Private to src/parent and the test kit.
 *
 * @module
 */

/** The faults set on one session or pool. */
export interface FaultState {
  /** How many of the next worker starts fail. */
  startFailures: number;
  /** How long every message of its workers is held back, in ms (0: none). */
  answerDelayMs: number;
}

/** Handle (the object a factory returned) to its resolved options. */
const owners = new WeakMap<object, object>();
/** Resolved options (the owner) to its faults. */
const states = new WeakMap<object, FaultState>();
/** Connection to its owner. */
const connections = new WeakMap<object, object>();
const aliases = new WeakMap<object, object>();
/** Owners that have ever had a fault set: 0 keeps the checks free. */
let inUse = 0;

/**
 * Records which resolved options a handle runs with, so faults set on the
 * handle reach its workers.
 *
 * @param handle What the factory returns.
 * @param owner Its resolved options, the object passed to `launchWorker`.
 * @returns `handle`.
 */
export function bindFaults<T extends object>(handle: T, owner: object): T {
  owners.set(handle, owner);
  return handle;
}

/**
 * The fault state of a handle, made on first use.
 *
 * @param handle A session or pool.
 * @returns Its state, or `undefined` when it is not a session or pool.
 */
export function faultsOf(handle: object): FaultState | undefined {
  const owner = owners.get(handle);
  if (owner === undefined) return undefined;
  let state = states.get(owner);
  if (state === undefined) {
    state = { startFailures: 0, answerDelayMs: 0 };
    states.set(owner, state);
    inUse++;
  }
  return state;
}

/**
 * Makes a copy of a handle's resolved options (a pool's options for one of
 * its `launchers`) share the handle's injected faults.
 *
 * @param copy The copy its starts are given.
 * @param owner The options the handle was bound to.
 */
export function shareFaults(copy: object, owner: object): void {
  aliases.set(copy, owner);
}

/**
 * Called as a worker starts: ties the connection to its owner and says
 * whether this start is to fail (consuming one injected failure).
 *
 * @param start The resolved options the start was given (the session's or
 *   pool's, or a copy of them: {@linkcode shareFaults}).
 * @param connection The new connection.
 * @returns Whether to fail this start.
 */
export function startFault(start: object, connection: object): boolean {
  const owner = aliases.get(start) ?? start;
  // Once per start, not per call: a delay set later reaches this worker too.
  connections.set(connection, owner);
  if (inUse === 0) return false;
  const state = states.get(owner);
  if (state === undefined || state.startFailures <= 0) return false;
  state.startFailures--;
  return true;
}

/**
 * How long to hold back a message of this connection's worker.
 *
 * @param connection The connection.
 * @returns The delay in ms (0 nearly always).
 */
export function answerDelayMs(connection: object): number {
  if (inUse === 0) return 0;
  const owner = connections.get(connection);
  return owner === undefined ? 0 : states.get(owner)?.answerDelayMs ?? 0;
}
