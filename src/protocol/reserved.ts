/**
 * Names no handler may have: they belong to the parent-side control surface
 * of sessions and pools, or would make a proxy thenable or break string
 * conversion. Shared by `defineWorker` (which refuses them) and the typed
 * proxy (which never forwards them).
 *
 * @module
 */

/** A reserved handler name: `defineWorker`'s type refuses handlers so named. */
export type ReservedName =
  | "then"
  | "catch"
  | "finally"
  | "call"
  | "stream"
  | "close"
  | "restart"
  | "invalidate"
  | "stats"
  | "pid"
  | "constructor"
  | "prototype"
  | "__proto__"
  | "toString"
  | "toLocaleString"
  | "valueOf"
  | "toJSON"
  | "inspect";

/** The names, checked against {@linkcode ReservedName} both ways. */
const NAMES = [
  "then",
  "catch",
  "finally",
  "call",
  "stream",
  "close",
  "restart",
  "invalidate",
  "stats",
  "pid",
  "constructor",
  "prototype",
  "__proto__",
  "toString",
  "toLocaleString",
  "valueOf",
  "toJSON",
  "inspect",
] as const satisfies readonly ReservedName[];

/** Fails type-checking when {@linkcode ReservedName} has a name NAMES lacks. */
const COMPLETE: [Exclude<ReservedName, (typeof NAMES)[number]>] extends [never]
  ? true
  : never = true;
void COMPLETE;

/** The reserved handler names. */
export const RESERVED_NAMES: readonly string[] = Object.freeze([...NAMES]);
