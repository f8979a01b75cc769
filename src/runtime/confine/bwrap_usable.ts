/**
 * Whether bubblewrap can run here, not only whether it is installed: user
 * namespaces may be forbidden (Docker's default seccomp profile, Ubuntu's
 * AppArmor restriction, `kernel.unprivileged_userns_clone=0`). Asked once
 * per process by running `bwrap --version` inside an empty sandbox with the
 * namespaces a worker gets (bubblewrap itself as the program: Deno's
 * `node:child_process` rewrites an argument list that names the Deno
 * binary). Where it cannot run, Landlock confines alone.
 *
 * @module
 */

import { spawnSync } from "../node_builtins.ts";
import { bwrapProbeArgv } from "../launch/bwrap.ts";

/** What {@linkcode bwrapUsable} found. */
export type BwrapUsability =
  | { readonly usable: true }
  | { readonly usable: false; readonly reason: string };

const probes = new Map<string, BwrapUsability>();

/**
 * Whether bubblewrap runs here with a worker's namespaces (asked once per
 * bubblewrap binary).
 *
 * @param bwrap The bubblewrap binary (real path).
 * @returns Usable, or why not (bubblewrap's own words).
 *
 * @example
 * ```ts ignore
 * import { bwrapUsable } from "./bwrap_usable.ts";
 *
 * const found = bwrapUsable("/usr/bin/bwrap");
 * if (!found.usable) console.error(found.reason);
 * ```
 */
export function bwrapUsable(bwrap: string): BwrapUsability {
  const cached = probes.get(bwrap);
  if (cached) return cached;
  const argv = bwrapProbeArgv(bwrap, bwrap);
  let found: BwrapUsability;
  try {
    const result = spawnSync(argv[0] as string, argv.slice(1), {
      env: {},
      encoding: "utf8",
      stdio: ["ignore", "ignore", "pipe"],
      timeout: 30_000,
    });
    if (result.status === 0) found = { usable: true };
    else {
      const said = String(result.stderr ?? "").trim().split("\n").at(-1);
      found = {
        usable: false,
        reason: result.error?.message ?? (said ||
          `it exited with code ${result.status}, signal ${result.signal}`),
      };
    }
  } catch (error: unknown) {
    found = {
      usable: false,
      reason: error instanceof Error ? error.message : String(error),
    };
  }
  probes.set(bwrap, found);
  return found;
}
