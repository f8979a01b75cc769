/**
 * The bubblewrap backend as one layer of a launch: a {@linkcode Wrapper}
 * that runs the inner step in bubblewrap's namespaces and mounts (argv from
 * `bwrap.ts`), with the seccomp filter when no inner layer installs one.
 *
 * @module
 */

import type { ResolvedPermissions } from "../permissions.ts";
import { exitThroughWrapper } from "../launch/exit.ts";
import type { LaunchStep, Wrapper } from "../launch/types.ts";
import { type BwrapGrants, sandboxedArgv } from "./bwrap.ts";
import { bwrapEnvironment } from "./bwrap_environment.ts";
import { PID_NAMESPACE_FD, USER_NAMESPACE_FD } from "./pid_namespace.ts";

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
  /**
   * The forwarded network's arguments (`netBwrapArgs()`), for `host:port`
   * grants.
   *
   * @default {undefined}
   */
  netArgs?: readonly string[];
  /**
   * Whether the confine step needs capabilities in the network namespace
   * (`netStepCapabilities()`).
   *
   * @default {false}
   */
  netCapabilities?: boolean;
  /**
   * How the grants are bound (see `BwrapOptions.grants`).
   *
   * @default {undefined}
   */
  grants?: BwrapGrants;
  /**
   * The files of the granted program names (see `BwrapOptions.programs`).
   *
   * @default {[]}
   */
  programs?: readonly string[];
  /**
   * Join the pid namespace the parent's workers share (`pid_namespace.ts`)
   * from the descriptors `pidNamespaceWrapper()` opens around bubblewrap;
   * omitted: a pid namespace of the worker's own. `dieWithParent: false`
   * where the inner step has a parent-death signal of its own (setpriv
   * inside): bubblewrap then outlives the parent until the holder's end has
   * killed the worker, and reaps it (an orphan would wait for the host's
   * init, and the namespace's end with it).
   *
   * @default {undefined}
   */
  sharedPidNamespace?: { dieWithParent: boolean };
}

/** The descriptor bubblewrap reads the seccomp filter from. */
const SECCOMP_FD = "3";

/**
 * The descriptor bubblewrap reads an embedded program from: the spawn's
 * descriptor 3 (`SpawnRequest.extraInput`), which every wrapper outside
 * passes on. Never with bubblewrap's own seccomp filter (a plan with a
 * confine step has the step install it).
 */
const EMBEDDED_FD = "3";

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
    // In the shared pid namespace, the holder's end kills the worker (see
    // Wrapper.diesWithParent); bubblewrap outside it then reaps the worker.
    ...(options.sharedPidNamespace === undefined
      ? {}
      : { diesWithParent: true }),
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
        ...(inner.embedded === undefined
          ? {}
          : { embedded: { fd: EMBEDDED_FD, path: inner.embedded.path } }),
        ...(options.netArgs ? { netArgs: options.netArgs } : {}),
        ...(options.netCapabilities ? { netCapabilities: true } : {}),
        ...(options.grants ? { grants: options.grants } : {}),
        programs: options.programs ?? [],
        ...(options.sharedPidNamespace
          ? {
            joinPidNamespace: {
              userFd: USER_NAMESPACE_FD,
              pidFd: PID_NAMESPACE_FD,
            },
            dieWithParent: options.sharedPidNamespace.dieWithParent,
          }
          : {}),
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
      const shared = options.sharedPidNamespace;
      return {
        argv,
        env: bwrapEnvironment(inner.env),
        ...(inner.embedded === undefined
          ? {}
          : { extraInput: inner.embedded.bytes }),
        readOnly: [options.bwrap],
        mapExit: exitThroughWrapper,
        // bubblewrap forks the worker; in a pid namespace of its own,
        // bubblewrap forks its init (pid 1), which forks the worker.
        levels: shared === undefined ? 2 : 1,
      };
    },
  };
}
