/**
 * airlock runs code that holds process-level state (native database
 * clients, vector indexes, any module-level singleton) in isolated worker
 * processes, on Deno and Bun. The parent never imports the client: it talks
 * to a worker process over stdin/stdout with length-prefixed frames.
 *
 * - `oneShot`: a fresh process per call, so each call sees the disk as it is now;
 * - `session`: one long-lived worker with concurrent calls, timeouts, crash
 *   recovery, setup replay and a real `restart()`;
 * - `pool`: many workers, lazily started, idle-reaped, recycled, cancellable.
 *
 * ```ts ignore
 * import { session } from "@airlock/airlock";
 * import type db from "./workers/db.ts"; // type only: the client never loads here
 *
 * await using s = await session<typeof db>(new URL("./workers/db.ts", import.meta.url), {
 *   permissions: { read: ["./data"], write: ["./data"] },
 * });
 * console.log(await s.query("hello", 3));
 * ```
 *
 * Two more entry points hold what most programs never name:
 * `@airlock/airlock/diagnostics` (the diagnostics channels, their events and
 * the parts of `stats()`) and `@airlock/airlock/types` (the types behind the
 * typed proxy and the options).
 *
 * @module
 */

export {
  AirlockError,
  type CallExecuted,
  type LimitBreach,
  PermissionError,
  PoolBusyError,
  ProtocolError,
  RemoteError,
  SessionClosedError,
  WorkerCrashedError,
  WorkerStartError,
  type WorkerStartFailure,
  WorkerTimeoutError,
} from "./src/errors.ts";
export {
  type Session,
  session,
  type SessionStats,
} from "./src/parent/session.ts";
export { pool } from "./src/parent/pool.ts";
export type {
  Pool,
  PoolStats,
  PoolWorkerStats,
} from "./src/parent/pool_handle.ts";
export { type OneShot, oneShot } from "./src/parent/one_shot.ts";
export type {
  CallOptions,
  CloseOptions,
  OneShotOptions,
  PoolOptions,
  SessionOptions,
  SetupCall,
  WorkerOptions,
} from "./src/parent/options.ts";
export type {
  Permissions,
  PermissionsOption,
} from "./src/runtime/permissions.ts";
export type { LimitsOption } from "./src/runtime/sandbox/limits/types.ts";
export {
  type StateOptions,
  type StateScope,
  stateScope,
} from "./src/parent/state_scope.ts";
export type { WorkerApi, WorkerStream } from "./src/parent/proxy.ts";
export type { WorkerTransport } from "./src/runtime/launch/transport.ts";
export { type CustomType, registerType } from "./src/protocol/register_type.ts";

// A program that started itself as a worker (a compiled executable, or
// AIRLOCK_SELF_EXEC=1) serves its worker module while this import runs.
import "./src/runtime/self_exec_boot.ts";
