/**
 * The check of a sandboxed worker's path grants for links a worker may
 * have made: a sandbox binds a grant by following links, so such a link
 * would widen the grant to its target.
 *
 * @module
 */

import { PermissionError } from "../../errors.ts";
import { dirname, realpathSync } from "../node_builtins.ts";
import { writableByWorker } from "../launch/executable.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import { SANDBOX_MESSAGES as SAYS } from "./messages.ts";
import { tooBroad } from "./mounts.ts";

/**
 * Refuses a path grant that is a link a worker may have made: its
 * directory lies where a worker of this process may write, or it leads to
 * `/`, the home directory or an ancestor of it.
 *
 * @param permissions The worker's resolved permissions.
 * @param module The worker's display name, for the error.
 * @param home The parent's home directory, when known.
 * @throws {PermissionError} naming the grant and its target.
 */
export function checkGrantLinks(
  permissions: ResolvedPermissions,
  module: string,
  home: string | undefined,
): void {
  for (const kind of ["read", "write", "ffi"] as const) {
    const scopes = permissions[kind];
    if (scopes === true) continue;
    for (const path of scopes) {
      let real: string;
      try {
        real = realpathSync(path);
      } catch {
        continue;
      }
      if (real === path) continue;
      const planted = writableByWorker(dirname(path));
      if (planted === undefined && !tooBroad(real, home)) continue;
      throw new PermissionError(
        SAYS.grantIsLink(kind, path, real, planted),
        { module, permission: kind },
      );
    }
  }
}
