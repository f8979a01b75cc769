/**
 * What the security tests of the launch path share: the hostile worker
 * fixture, and test-kit skips (printed with the reason; with
 * `AIRLOCK_REQUIRE_TOOLS=1` a missing tool fails instead).
 *
 * @module
 */

import { needs, needsSandbox } from "../_helpers/tools.ts";

/** The hostile worker fixture. */
export const HOSTILE: URL = new URL(
  "../fixtures/security/hostile_worker.ts",
  import.meta.url,
);

/**
 * The skip of tests that need the OS sandbox (bubblewrap, or Landlock alone),
 * or `false`. Call at registration time.
 *
 * @returns The reason, or `false`.
 */
export function sandboxSkip(): string | false {
  return needsSandbox().skip ?? false;
}

/**
 * The skip of tests that need bubblewrap itself (its pid namespace), or
 * `false`. Call at registration time.
 *
 * @returns The reason, or `false`.
 */
export function bwrapSkip(): string | false {
  return needs("bwrap").skip ?? false;
}
