/**
 * Names no handler may have: they belong to the parent-side control surface
 * of sessions and pools, or would make a proxy thenable or break string
 * conversion. Shared by `defineWorker` (which refuses them) and the typed
 * proxy (which never forwards them).
 *
 * @module
 */

/** The reserved handler names. */
export const RESERVED_NAMES: readonly string[] = Object.freeze([
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
]);
