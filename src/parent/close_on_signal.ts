/**
 * A clean shutdown on SIGINT and SIGTERM in one call: `closeOnSignal()`.
 *
 * @module
 */

import { onSignal } from "../runtime/node_builtins.ts";

/** What `closeOnSignal()` closes: a session, a pool, a oneShot with spares. */
export interface Closable {
  /** Closes it: drains (or, with `force`, ends) its calls, then its processes are gone. */
  close(options?: { force?: boolean }): Promise<void>;
}

/** The signals {@linkcode closeOnSignal} listens for. */
export type ShutdownSignal = "SIGINT" | "SIGTERM" | "SIGHUP";

/** Options of {@linkcode closeOnSignal}. */
export interface CloseOnSignalOptions {
  /**
   * The signals that start the shutdown.
   *
   * @default {["SIGINT", "SIGTERM"]}
   */
  signals?: readonly ShutdownSignal[];
  /**
   * Close with `{ force: true }`: end running calls at once instead of
   * letting them finish (each handle's `closeTimeoutMs` bounds a plain
   * close).
   *
   * @default {false}
   */
  force?: boolean;
}

/**
 * Closes every handle given once the process receives SIGINT or SIGTERM,
 * and resolves with the signal's name once they are all closed (their
 * processes gone). Until then the signals do not end the process; after
 * the first one its listeners are removed, so a second signal ends it at
 * once as usual. Works on Deno and Bun alike (`node:process` signal
 * events). Use it where the docs built this by hand: the promise resolves
 * where the program's main code should end.
 *
 * @param handles The sessions, pools and oneShot handles to close.
 * @param options Which signals, and whether to force.
 * @returns The signal received, once every handle is closed.
 * @throws {Error} (the promise rejects) when a `close()` rejects.
 *
 * @example Shut down cleanly on SIGINT or SIGTERM
 * ```ts ignore
 * import { pool, session } from "@airlock/airlock";
 * import { closeOnSignal } from "@airlock/airlock/shutdown";
 *
 * const db = await session(new URL("./workers/db.ts", import.meta.url));
 * const hashes = pool(new URL("./workers/hash.ts", import.meta.url));
 * serve(db, hashes); // your work
 * const signal = await closeOnSignal([db, hashes]);
 * console.log(`${signal}: every worker is gone`);
 * ```
 */
export function closeOnSignal(
  handles: readonly Closable[],
  options: CloseOnSignalOptions = {},
): Promise<ShutdownSignal> {
  const signals = [...(options.signals ?? ["SIGINT", "SIGTERM"])];
  for (const signal of signals) {
    if (signal !== "SIGINT" && signal !== "SIGTERM" && signal !== "SIGHUP") {
      throw new TypeError(
        `Cannot close on signal: expected "SIGINT", "SIGTERM" or "SIGHUP", received ${
          JSON.stringify(signal)
        }`,
      );
    }
  }
  const list = [...handles];
  const force = options.force === true;
  return new Promise<ShutdownSignal>((resolve, reject) => {
    const removers: (() => void)[] = [];
    const received = (signal: ShutdownSignal) => {
      for (const remove of removers.splice(0)) remove();
      Promise.all(
        list.map((handle) =>
          force ? handle.close({ force: true }) : handle.close()
        ),
      ).then(() => resolve(signal), reject);
    };
    for (const signal of signals) {
      removers.push(onSignal(signal, () => received(signal)));
    }
  });
}
