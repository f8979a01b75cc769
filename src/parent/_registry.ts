/**
 * The live worker processes this process started: connections register when
 * they spawn and leave once their process is gone. Read by the test kit
 * (`@airlock/airlock/testing`: `liveWorkers()`, `assertNoWorkers()`, fault
 * injection). Private to src/parent and the test kit.
 *
 * @module
 */

/** What the registry knows of a live worker. */
export interface RegisteredWorker {
  /** The worker's pid (the real worker's inside any sandbox, once ready). */
  readonly pid: number;
  /** The worker module (or command), as in error messages. */
  readonly module: string;
  /** Keeps its output from now on out of the log (the tail still has it). */
  quietLog?(): void;
}

/** Each live worker, and whether its process runs on this machine. */
const live = new Map<RegisteredWorker, boolean>();

/**
 * Registers a worker whose process was just spawned.
 *
 * @param worker The connection.
 * @param local Whether its process runs on this machine (not through a
 * `launcher`).
 */
export function registerWorker(worker: RegisteredWorker, local: boolean): void {
  live.set(worker, local);
}

/**
 * Removes a worker whose process is gone.
 *
 * @param worker The connection.
 */
export function unregisterWorker(worker: RegisteredWorker): void {
  live.delete(worker);
}

/**
 * The workers registered now, oldest first.
 *
 * @returns Them.
 */
export function registeredWorkers(): RegisteredWorker[] {
  return [...live.keys()];
}

/**
 * Whether a registered worker runs on this machine.
 *
 * @param worker The worker.
 * @returns `true` for a local process, `false` for one started through a
 * launcher, `undefined` when it is not registered (gone).
 */
export function isLocalWorker(worker: RegisteredWorker): boolean | undefined {
  return live.get(worker);
}
