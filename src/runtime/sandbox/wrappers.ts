/**
 * The OS sandbox's wrappers of one worker, built from its plan
 * (`plan.ts`), innermost first: the confine step (Landlock and seccomp, or
 * seccomp alone) inside bubblewrap, or either alone. Decides nothing: which
 * backends run is the plan's; this adds what the private code cache needs
 * and where the seccomp filter comes from.
 *
 * @module
 */

import { PermissionError } from "../../errors.ts";
import { process } from "../node_builtins.ts";
import { isExecutableFile } from "../launch/executable.ts";
import type { Wrapper } from "../launch/types.ts";
import { setprivWrapper } from "../launch/wrappers.ts";
import { pidNamespaceWrapper } from "./pid_namespace.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import { bwrapWrapper } from "./bwrap_wrapper.ts";
import { bindFdsWrapper, landlockWrapper } from "./confine_wrapper.ts";
import type { ResolvedGrants } from "./grant_links.ts";
import { SANDBOX_MESSAGES as SAYS } from "./messages.ts";
import type { SandboxPlan } from "./plan.ts";
import { seccompArch, seccompFilter } from "./seccomp.ts";
import { seccompFile } from "./seccomp_file.ts";
import { nativeConfineElf } from "./native_step.ts";
import type { NetBroker } from "./net/broker.ts";
import { netBwrapArgs, netStepCapabilities } from "./net/sandbox_net.ts";

/** The private code cache of a sandboxed Deno worker, as the launch prepared it. */
export interface PlannedCodeCache {
  /** The cache directory. */
  dir: string;
  /** Whether the worker may write it (the warm-up start), or only read it. */
  writable: boolean;
  /** The directory inside it the worker writes (Deno's web storage). */
  scratch: string;
}

/** Options of {@linkcode sandboxWrappers}. */
export interface SandboxWrappersOptions {
  /** The worker's display name, for errors. */
  module: string;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** The worker's working directory. */
  cwd: string;
  /** The binary the worker's command starts (real path). */
  binary: string;
  /** The private code cache, when the worker has one. */
  codeCache: PlannedCodeCache | undefined;
  /** The path grants as the parent resolved them (`grant_links.ts`). */
  grants: ResolvedGrants;
  /**
   * What the worker may execute (the runtime binary or a command's program,
   * the programs its `run` names resolve to, their interpreters), and the
   * files bubblewrap mounts for the `run` names.
   */
  programs: { executables: readonly string[]; mounts: readonly string[] };
  /** Registers a callback run when this process exits (the seccomp file's directory goes then). */
  onExit: (callback: () => void) => void;
  /**
   * The broker of the plan's forwarded network (`plan.net`), started by the
   * launch.
   *
   * @default {undefined}
   */
  network?: NetBroker;
  /**
   * `setpriv` (the parent-death guard), when there is one: in the shared pid
   * namespace the worker dies with bubblewrap while bubblewrap outlives the
   * parent long enough to reap it, through `setpriv` inside bubblewrap or,
   * where the plan says `parentDeath: "step"`, the native step's own
   * `--pdeathsig` (one exec fewer). `undefined`: no guard (the worker
   * watches its parent; bubblewrap dies with it).
   *
   * @default {undefined}
   */
  setpriv?: string | undefined;
}

/**
 * The wrappers that confine a worker as its plan says, innermost first.
 *
 * @param plan A plan that confines the worker.
 * @param options The worker's permissions, paths and code cache.
 * @returns The wrappers.
 * @throws {PermissionError} when bubblewrap's seccomp filter cannot be
 *   built or written.
 */
export function sandboxWrappers(
  plan: Extract<SandboxPlan, { confined: true }>,
  options: SandboxWrappersOptions,
): Wrapper[] {
  const { permissions, codeCache, grants } = options;
  const wrappers: Wrapper[] = [];
  // A grant bound from a descriptor (one a worker may swap) keeps a pid
  // namespace of its own: bubblewrap started by the bind-fds step cannot
  // join the shared one (its setns of the user namespace fails).
  const shared = plan.pidNamespace === "shared" && grants.raceable.size === 0;
  const guarded = shared && options.setpriv !== undefined;
  if (plan.step !== undefined) {
    const write = permissions.write;
    wrappers.push(landlockWrapper({
      runner: plan.step.runner,
      support: plan.step.support,
      // The warm-up writes the private code cache (workers read it, as
      // one of the step's read-only paths); web storage is written only in
      // bubblewrap's private tmpfs (without it the directory is shared).
      permissions: codeCache === undefined || write === true
        ? permissions
        : codeCache.writable
        ? { ...permissions, write: [...write, codeCache.dir] }
        : plan.bwrap !== undefined
        ? { ...permissions, write: [...write, codeCache.scratch] }
        : permissions,
      cwd: options.cwd,
      alone: plan.bwrap === undefined,
      // Inside bubblewrap a grant is at its own path (bound there); alone,
      // at its real path. Either way the step follows no link to it.
      grants: {
        at: plan.bwrap === undefined ? grants.sources : new Map(),
        required: grants.raceable,
      },
      executables: options.programs.executables,
      stepEnv: plan.step.stepEnv,
      ...(plan.net === undefined ? {} : { forwarder: plan.net }),
      ...(plan.step.program === "native"
        ? {
          native: nativeElf(options.module),
          parentDeath: guarded && plan.parentDeath === "step",
        }
        : {}),
    }));
  }
  if (guarded && plan.parentDeath !== "step" && options.setpriv) {
    wrappers.push(setprivWrapper(options.setpriv));
  }
  if (plan.bwrap !== undefined) {
    wrappers.push(bwrapWrapper({
      bwrap: plan.bwrap,
      runtimeBinary: options.binary,
      permissions,
      cwd: options.cwd,
      ...(plan.seccomp === "bwrap" ? { seccomp: bwrapSeccomp(options) } : {}),
      ...(plan.net !== undefined && options.network !== undefined
        ? {
          netArgs: netBwrapArgs(options.network, plan.net),
          netCapabilities: netStepCapabilities(plan.net).length > 0,
        }
        : {}),
      grants: { sources: grants.sources, throughFd: grants.raceable },
      programs: options.programs.mounts,
      ...(shared
        ? {
          sharedPidNamespace: { dieWithParent: options.setpriv === undefined },
        }
        : {}),
    }));
    // A grant a worker may swap is bound from a descriptor the confine
    // step opens, on the host, without following links.
    if (grants.raceable.size > 0) {
      const [first = ""] = grants.raceable;
      if (plan.step === undefined) {
        throw new PermissionError(
          SAYS.grantNeedsStep(first, "the plan has no confine step"),
          { module: options.module, permission: "sandbox" },
        );
      }
      wrappers.push(bindFdsWrapper({
        runner: plan.step.runner,
        stepEnv: plan.step.stepEnv,
      }));
    }
    // Outermost: descriptors 4 and 5 are taken before the bind-fds step
    // opens any.
    if (shared) {
      wrappers.push(pidNamespaceWrapper({
        bwrap: plan.bwrap,
        shell: pidNamespaceShell(options),
      }));
    }
  }
  return wrappers;
}

/**
 * The native confine step of this architecture (the plan names it only
 * where there is one).
 *
 * @throws {PermissionError} when there is none.
 */
function nativeElf(module: string): Uint8Array {
  const elf = nativeConfineElf(process.arch);
  if (elf === undefined) {
    throw new PermissionError(SAYS.nativeStepArch(process.arch), {
      module,
      permission: "sandbox",
    });
  }
  return elf;
}

/** The shell that opens the seccomp filter (or the shared namespaces) for bubblewrap. */
const SHELL = "/bin/sh";

/**
 * The shell that opens the shared pid namespace's descriptors for
 * bubblewrap (see `pid_namespace.ts`).
 *
 * @throws {PermissionError} when it is missing.
 */
function pidNamespaceShell(options: SandboxWrappersOptions): string {
  const fail = (detail: string): never => {
    throw new PermissionError(SAYS.pidNamespaceShell(detail), {
      module: options.module,
      permission: "sandbox",
    });
  };
  if (!isExecutableFile(SHELL, (detail) => fail(detail))) {
    return fail(SAYS.bwrapSeccompShell(SHELL));
  }
  return SHELL;
}

/**
 * The seccomp filter bubblewrap installs when no confine step does (see
 * `seccomp.ts` for the list): its file and the shell that opens it.
 *
 * @throws {PermissionError} when it cannot be built or written.
 */
function bwrapSeccomp(
  options: SandboxWrappersOptions,
): { file: string; shell: string } {
  const fail = (detail: string, cause?: unknown): never => {
    throw new PermissionError(SAYS.bwrapSeccomp(detail), {
      module: options.module,
      permission: "sandbox",
      ...(cause === undefined ? {} : { cause }),
    });
  };
  if (seccompArch(process.arch) === undefined) {
    return fail(SAYS.bwrapSeccompArch(process.arch));
  }
  if (!isExecutableFile(SHELL, (detail) => fail(detail))) {
    return fail(SAYS.bwrapSeccompShell(SHELL));
  }
  try {
    return {
      // bubblewrap gives a worker without net a network namespace of its own.
      file: seccompFile(
        seccompFilter(options.permissions, { routeNetlink: true }),
        options.onExit,
      ),
      shell: SHELL,
    };
  } catch (error: unknown) {
    return fail(error instanceof Error ? error.message : String(error), error);
  }
}
