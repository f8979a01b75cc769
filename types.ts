/**
 * The types behind airlock's public ones, for code that is generic over
 * worker definitions or builds options piece by piece: how a worker
 * definition maps to the typed proxy (`HandlersOf`, `CallOf`, ...), and the
 * parts of the options (`RuntimeOption`, `SandboxOption`, `CallKey`, a
 * transport's `TransportProcess`, ...).
 * A program that only starts workers and calls them needs none of them:
 * `@airlock/airlock` has the modes, their options and the errors.
 *
 * ```ts ignore
 * import type { OpOf } from "@airlock/airlock/types";
 * import type db from "./workers/db.ts";
 *
 * const ops: OpOf<typeof db>[] = ["query", "ingest"];
 * ```
 *
 * @module
 */

export type {
  ArgsOf,
  CallOf,
  HandlersOf,
  ItemOf,
  OpOf,
  ResultOf,
  StreamCall,
  WorkerCall,
} from "./src/parent/proxy.ts";
export type {
  CallKey,
  LogSource,
  RuntimeOption,
  SandboxOption,
} from "./src/parent/options.ts";
export type { PathsOption } from "./src/parent/state_scope.ts";
export type {
  LauncherOption,
  TransportProcess,
  TransportRequest,
} from "./src/runtime/launch/transport.ts";
export type {
  LimitKey,
  LimitsEnforce,
} from "./src/runtime/sandbox/limits/types.ts";
