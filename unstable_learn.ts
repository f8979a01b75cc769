/**
 * Learn mode (experimental, a development aid): find the `permissions` a
 * Deno worker needs in one run. The worker runs with everything granted and
 * Deno's permission audit on (`DENO_AUDIT_PERMISSIONS`, Deno 2.7 and
 * later); every access Deno checked during the calls becomes a suggested
 * `permissions` object. Native code is not audited: see `unseen` in the
 * result, and docs/permissions.md, "Learn mode". Never use it in
 * production: the worker is unconfined while it learns.
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
  type LearnedAccess,
  type LearnedPermissions,
  type LearnOptions,
  learnPermissions,
  permissionsFromAudit,
} from "./src/parent/learn.ts";
export type { Permissions } from "./src/runtime/permissions.ts";
