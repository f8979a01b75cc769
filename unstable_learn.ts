/**
 * Learn mode (experimental, a development aid): find the `permissions` a
 * worker needs in one call. On Deno, one run with everything granted and
 * Deno's permission audit on (`DENO_AUDIT_PERMISSIONS`, Deno 2.7 and later)
 * gives a first suggestion; runs under the OS sandbox add what it refuses
 * (native code's accesses too) until the calls pass; then each entry is
 * removed in turn and kept only if the calls then fail. See
 * docs/permissions.md, "Learn mode". Never use it in production: the audit
 * run is unconfined.
 *
 * ```ts ignore
 * import { learnPermissions } from "@airlock/airlock/unstable-learn";
 *
 * const learned = await learnPermissions(new URL("./workers/db.ts", import.meta.url), {
 *   calls: [["open", "./data/app.db"], ["query", "select 1"]],
 * });
 * console.log(learned.permissions);
 * ```
 *
 * @experimental
 * @module
 */

export {
  type LearnedPermissions,
  type LearnOptions,
  learnPermissions,
} from "./src/parent/learn.ts";
export {
  type LearnedAccess,
  permissionsFromAudit,
} from "./src/parent/learn_audit.ts";
export type { Permissions } from "./src/runtime/permissions.ts";
