/**
 * The layers around a worker command, each a {@linkcode Wrapper}: the OS
 * sandbox (bubblewrap), the parent-death guard (`setpriv --pdeathsig`) and
 * a user's launcher (ssh, docker exec...). The command builder applies them
 * innermost first; another sandbox backend (Landlock, run inside bubblewrap,
 * which forbids mounts under it) is one more wrapper in the same list.
 *
 * @module
 */

import { basename } from "../node_builtins.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import { bwrapEnvironment, sandboxedArgv } from "./bwrap.ts";
import { exitThroughWrapper } from "./exit.ts";
import type { LaunchStep, Wrapper } from "./types.ts";

/** Options of {@linkcode bwrapWrapper}. */
export interface BwrapWrapperOptions {
  /** The bubblewrap binary (real path). */
  bwrap: string;
  /** The runtime binary the inner command starts (real path), mounted at its path. */
  runtimeBinary: string;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** The worker's working directory. */
  cwd: string;
  /**
   * A seccomp filter for bubblewrap to install (`--seccomp`), when no inner
   * layer installs one: the file holding the BPF program (in a directory no
   * worker may write) and the shell that opens it as fd 3 for bubblewrap.
   *
   * @default {undefined}
   */
  seccomp?: { file: string; shell: string };
}

/** The descriptor bubblewrap reads the seccomp filter from. */
const SECCOMP_FD = "3";

/**
 * The bubblewrap wrapper: the inner command runs in the sandbox with the
 * inner step's environment (given to bubblewrap, which passes it on; the
 * loader's variables are set inside, see `bwrapEnvironment`) and its
 * `readOnly` paths mounted besides the grants. bubblewrap reports a worker
 * killed by signal N as exit code 128 + N.
 *
 * @param options The binaries, permissions and cwd.
 * @returns The wrapper.
 */
export function bwrapWrapper(options: BwrapWrapperOptions): Wrapper {
  return {
    name: "bwrap",
    wrap(inner: LaunchStep) {
      const argv = sandboxedArgv({
        bwrap: options.bwrap,
        runtimeBinary: options.runtimeBinary,
        command: inner.argv,
        readOnly: inner.readOnly,
        writable: inner.writable ?? [],
        scratch: inner.scratch ?? [],
        permissions: options.permissions,
        env: inner.env,
        cwd: options.cwd,
        ...(options.seccomp ? { seccompFd: SECCOMP_FD } : {}),
      });
      const seccomp = options.seccomp;
      if (seccomp !== undefined) {
        // fd 3 opened on the filter by a shell that then execs bubblewrap
        // (no process between).
        argv.unshift(
          seccomp.shell,
          "-c",
          `exec "$@" ${SECCOMP_FD}<"$0"`,
          seccomp.file,
        );
      }
      return {
        argv,
        env: bwrapEnvironment(inner.env),
        readOnly: [options.bwrap],
        mapExit: exitThroughWrapper,
        // bubblewrap forks its init (pid 1 of the new pid namespace), which
        // forks the worker.
        levels: 2,
      };
    },
  };
}

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
