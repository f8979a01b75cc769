/**
 * The generic layers around a worker command, each a {@linkcode Wrapper}:
 * the parent-death guard (`setpriv --pdeathsig`) and a user's launcher
 * (ssh, docker exec...). The command builder applies them innermost first,
 * outside the OS sandbox's wrappers (src/runtime/sandbox/wrappers.ts).
 *
 * @module
 */

import { basename } from "../node_builtins.ts";
import { exitThroughWrapper } from "./exit.ts";
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

/**
 * Quotes one argument for a POSIX shell: unchanged when it holds only
 * characters no shell treats specially, else in single quotes (a single
 * quote inside becomes `'\''`).
 *
 * @param arg The argument.
 * @returns The argument as a shell word.
 *
 * @example
 * ```ts
 * import { shellQuote } from "./wrappers.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(shellQuote("/usr/bin/deno"), "/usr/bin/deno");
 * assert.equal(shellQuote("it's"), `'it'\\''s'`);
 * ```
 */
export function shellQuote(arg: string): string {
  if (/^[A-Za-z0-9_@%+:,./-]+$/.test(arg)) return arg;
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * Whether a launcher hands the worker command to a remote shell as one line
 * (ssh joins the arguments after the host with spaces), so that each
 * argument must be quoted. `docker exec`, `kubectl exec` and the like pass
 * the argv through as it is.
 *
 * @param launcher The launcher prefix.
 * @returns Whether the worker argv is shell-quoted.
 */
export function launcherUsesShell(launcher: readonly string[]): boolean {
  return basename(launcher[0] ?? "") === "ssh";
}

/**
 * A user's launcher prefix (`ssh host`, `docker exec -i box`): the inner
 * command runs elsewhere, so its pid cannot be inspected here. ssh and
 * `docker exec` report a command killed by signal N as 128 + N.
 *
 * @param launcher The prefix.
 * @returns The wrapper.
 */
export function launcherWrapper(launcher: readonly string[]): Wrapper {
  return {
    name: "launcher",
    wrap(inner: LaunchStep) {
      const remote = launcherUsesShell(launcher)
        ? inner.argv.map(shellQuote)
        : inner.argv;
      return {
        argv: [...launcher, ...remote],
        env: inner.env,
        readOnly: [],
        mapExit: exitThroughWrapper,
      };
    },
  };
}
