/**
 * What airlock reports about its workers, for monitoring code: the names of
 * its `node:diagnostics_channel` channels, the shape of each event, and the
 * parts of `stats()` that a dashboard names.
 *
 * ```ts ignore
 * import dc from "node:diagnostics_channel";
 * import { DIAGNOSTICS_CHANNELS, type WorkerExitEvent } from "@airlock/airlock/diagnostics";
 *
 * // Keep the channel referenced: Bun drops one nothing refers to.
 * const exits = dc.channel(DIAGNOSTICS_CHANNELS.workerExit);
 * exits.subscribe((message) => {
 *   const exit = message as WorkerExitEvent;
 *   if (!exit.requested) console.warn(`worker ${exit.pid} died`, exit.signal);
 * });
 * ```
 *
 * See docs/observability.md.
 *
 * @module
 */

export {
  type CallRetryEvent,
  type CallTimeoutEvent,
  type CallTraceContext,
  DIAGNOSTICS_CHANNELS,
  type NetConnectionEvent,
  type RecycleCause,
  type WorkerExitEvent,
  type WorkerMode,
  type WorkerRecycleEvent,
  type WorkerStartEvent,
} from "./src/parent/_events.ts";
export type {
  CallMetricsStats,
  CallStats,
  RecycleCounts,
  StatsOptions,
  TimingSummary,
} from "./src/parent/stats.ts";
export type {
  LimitMechanism,
  LimitMechanisms,
} from "./src/runtime/sandbox/limits/types.ts";
export type { SandboxBackend } from "./src/runtime/sandbox/types.ts";
