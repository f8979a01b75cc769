/**
 * The one resolution of a sandboxed worker's path grants, before its
 * start: a link a worker may have made is refused (it would widen the grant
 * to its target), and what is resolved here is what the sandbox binds, with
 * no link followed later (issue 24, item 1: bubblewrap and the confine step
 * resolved the path again, following a link a worker had swapped in).
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
 * How the parent resolved a worker's path grants (`read`, `write`, `ffi`),
 * once, before the start: the real path of each, and those a worker may
 * have made or may swap for a link (their directory lies where a worker of
 * this process may write). The sandbox binds and rules exactly these: a
 * raceable grant from a descriptor opened without following links, every
 * grant with no link followed (see `BwrapOptions.grants`,
 * `LandlockRulesetOptions.grants`).
 */
export interface ResolvedGrants {
  /** The real path of each existing granted path, by granted path. */
  readonly sources: ReadonlyMap<string, string>;
  /** Granted paths a worker may have made or may swap. */
  readonly raceable: ReadonlySet<string>;
}

/**
 * Resolves the path grants once, and refuses one that is a link a worker
 * may have made (its directory lies where a worker of this process may
 * write) or that leads to `/`, the home directory or an ancestor of it, and
 * one that is missing where a worker may write (a worker could make it a
 * link later: 0.2 skipped it, and bubblewrap then followed the link).
 *
 * @param permissions The worker's resolved permissions.
 * @param module The worker's display name, for the error.
 * @param home The parent's home directory, when known.
 * @returns The real paths, and the grants a worker may race.
 * @throws {PermissionError} naming the grant and its target.
 */
export function resolveGrantPaths(
  permissions: ResolvedPermissions,
  module: string,
  home: string | undefined,
): ResolvedGrants {
  const sources = new Map<string, string>();
  const raceable = new Set<string>();
  for (const kind of ["read", "write", "ffi"] as const) {
    const scopes = permissions[kind];
    if (scopes === true) continue;
    for (const path of scopes) {
      const planted = writableByWorker(dirname(path));
      let real: string;
      try {
        real = realpathSync(path);
      } catch {
        if (planted === undefined) continue;
        throw new PermissionError(SAYS.grantMissing(kind, path, planted), {
          module,
          permission: kind,
        });
      }
      if (real !== path && (planted !== undefined || tooBroad(real, home))) {
        throw new PermissionError(
          SAYS.grantIsLink(kind, path, real, planted),
          { module, permission: kind },
        );
      }
      sources.set(path, real);
      if (planted !== undefined || writableByWorker(dirname(real))) {
        raceable.add(path);
      }
    }
  }
  return { sources, raceable };
}
