/**
 * The worker side of airlock: define what a worker process serves.
 *
 * A worker module default-exports a definition made by `defineWorker`. The
 * parent starts it with `oneShot`, `session` or `pool` from
 * `@airlock/airlock`, and imports its type only, so whatever the handlers
 * open (a native database client, a vector index) lives in the worker
 * process alone.
 *
 * ```ts ignore
 * // workers/db.ts
 * import { defineWorker } from "@airlock/airlock/worker";
 * import { DatabaseSync } from "node:sqlite";
 *
 * let db: DatabaseSync | undefined;
 * export default defineWorker({
 *   open(path: string) {
 *     db = new DatabaseSync(path);
 *   },
 *   count(table: string) {
 *     return db!.prepare(`select count(*) as n from ${table}`).get();
 *   },
 * });
 * ```
 *
 * @module
 */

export {
  type CallContext,
  defineWorker,
  type DefineWorkerOptions,
  type Handler,
  type Handlers,
  type NoReservedNames,
  RESERVED_NAMES,
  type ReservedName,
  type TraceContext,
  type WorkerDefinition,
} from "./src/worker/define_worker.ts";
export { type CustomType, registerType } from "./src/protocol/register_type.ts";
