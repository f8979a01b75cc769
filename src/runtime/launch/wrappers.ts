/**
 * The generic layer around a local worker command, a {@linkcode Wrapper}:
 * the parent-death guard (`setpriv --pdeathsig`). The command builder
 * applies it outside the OS sandbox's wrappers
 * (src/runtime/sandbox/wrappers.ts). A user's launcher is no wrapper but a
 * transport (transport.ts).
 *
 * @module
 */

import type { LaunchStep, Wrapper } from "./types.ts";

/**
 * The parent-death guard: `setpriv --pdeathsig KILL` execs the inner
 * command with a parent-death signal, so the worker dies with its parent
 * even when blocked in synchronous code.
 *
 * @param setpriv The `setpriv` binary (real path).
 * @returns The wrapper.
 */
export function setprivWrapper(setpriv: string): Wrapper {
  return {
    name: "setpriv",
    wrap(inner: LaunchStep) {
      return {
        argv: [setpriv, "--pdeathsig", "KILL", "--", ...inner.argv],
        env: inner.env,
        readOnly: [setpriv, ...inner.readOnly],
      };
    },
  };
}
