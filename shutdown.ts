/**
 * A clean shutdown in one call: close the sessions and pools a program
 * holds when it receives SIGINT or SIGTERM, on Deno and Bun alike.
 *
 * ```ts ignore
 * import { session } from "@airlock/airlock";
 * import { closeOnSignal } from "@airlock/airlock/shutdown";
 *
 * const db = await session(new URL("./workers/db.ts", import.meta.url));
 * // ... serve requests with db ...
 * await closeOnSignal([db]); // on SIGINT or SIGTERM: db closed, its worker gone
 * ```
 *
 * @module
 */

export {
  type Closable,
  closeOnSignal,
  type CloseOnSignalOptions,
  type ShutdownSignal,
} from "./src/parent/close_on_signal.ts";
