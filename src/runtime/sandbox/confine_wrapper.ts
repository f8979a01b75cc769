/**
 * The Landlock backend as one layer of a launch: a wrapper that runs the
 * inner command through the confine step, with a Landlock ruleset built from
 * the worker's permissions and the seccomp filter. Inside bubblewrap when
 * both are used (bubblewrap mounts, and a Landlock domain forbids mounting).
 * Whether it is used is `plan.ts`'s decision; this builds it.
 *
 * @module
 */

import { dirname, fileURLToPath, join } from "../node_builtins.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import type { LaunchStep, WrappedStep, Wrapper } from "../launch/types.ts";
import {
  confinedArgv,
  confineEntryUrl,
  type ConfineRunner,
  confineSpec,
  confineStepArgv,
  type ConfineSupport,
} from "./confine_command.ts";
import { SANDBOX_MESSAGES as SAYS } from "./messages.ts";
import {
  BIND_FDS_FLAG,
  type BindFdsSpec,
  CONFINE_HELD_ENV_PREFIX,
  CONFINE_SPEC_VERSION,
} from "./spec.ts";
import { BIND_FD_PLACEHOLDER } from "./bwrap.ts";
import type { GrantPaths } from "./landlock.ts";
import {
  addressHex,
  type NetLayout,
  sandboxLocalAddresses,
} from "./net/targets.ts";
import { forwarderCommand, NET_SOCKET_IN_SANDBOX } from "./net/sandbox_net.ts";
import { NATIVE_CONFINE_PATH, nativeConfineArgv } from "./native_step.ts";

/** Options of {@linkcode landlockWrapper}. */
export interface LandlockWrapperOptions {
  /** The runtime that runs the confine step. */
  runner: ConfineRunner;
  /** What the kernel offers (a host fact: `facts.ts`). */
  support: Readonly<Pick<ConfineSupport, "landlockAbi" | "seccomp">>;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** The worker's working directory. */
  cwd: string;
  /**
   * Whether Landlock is the only backend (no bubblewrap around it): the
   * seccomp filter then also refuses the path-based metadata calls, which
   * Landlock does not check, and routing netlink sockets (the worker is in
   * the host's network namespace).
   *
   * @default {false}
   */
  alone?: boolean;
  /**
   * How the parent resolved the grants (see `LandlockRulesetOptions.grants`).
   *
   * @default {undefined}
   */
  grants?: GrantPaths;
  /**
   * Programs the worker may execute, readable and executable: the runtime
   * binary (or a command's program and its prefix), the programs its `run`
   * names resolve to, and their interpreters.
   */
  executables: readonly string[];
  /**
   * Variables the step itself runs with, restored to the worker's own
   * values (or removed) before the worker starts: see
   * {@linkcode stepEnvironment}.
   */
  stepEnv: Readonly<Record<string, string>>;
  /**
   * The worker's forwarded network (`host:port` grants under bubblewrap):
   * before confining itself the runtime step starts its forwarder, the
   * native step hands the network's listening sockets to the native relay.
   *
   * @default {undefined}
   */
  forwarder?: NetLayout;
  /**
   * The native confine step's bytes (`native_step.ts`), when the plan runs
   * it instead of the runtime step: the inner step runs through it, and
   * the sandbox around makes it at {@linkcode NATIVE_CONFINE_PATH}.
   *
   * @default {undefined}
   */
  native?: Uint8Array;
  /**
   * With `native`: the step sets the worker's parent-death signal itself
   * (`--pdeathsig`), in place of a `setpriv` between bubblewrap and the
   * step (the plan's `parentDeath: "step"`).
   *
   * @default {false}
   */
  parentDeath?: boolean;
}

/**
 * The variables the confine step runs with on `runner`: for Deno, a cache
 * directory of its own under the parent's (`<DENO_DIR>/airlock-confine`:
 * the step's compiled code never comes from a cache a worker could write)
 * and no update check; for Bun, no transpiler cache.
 *
 * @param runner The runtime that runs the step.
 * @param parentDenoDir The parent's Deno cache directory, when known.
 * @returns The variables, or an error detail when the step cannot run.
 */
export function stepEnvironment(
  runner: ConfineRunner,
  parentDenoDir: string | undefined,
): Record<string, string> | { error: string } {
  if (runner.runtime === "bun") {
    return { BUN_RUNTIME_TRANSPILER_CACHE_PATH: "0" };
  }
  if (parentDenoDir === undefined) {
    return { error: SAYS.stepNeedsDenoDir() };
  }
  return {
    DENO_DIR: join(parentDenoDir, "airlock-confine"),
    DENO_NO_UPDATE_CHECK: "1",
  };
}

/**
 * The paths the confine step must read to run (its runtime binary, its
 * code, its cache): what bubblewrap mounts when the step runs inside it.
 *
 * @param runner The runtime that runs the step.
 * @param stepEnv The step's own variables.
 * @returns Absolute paths.
 */
export function stepReadOnly(
  runner: ConfineRunner,
  stepEnv: Readonly<Record<string, string>>,
): string[] {
  const paths = [runner.binary];
  const entry = confineEntryUrl();
  if (entry.protocol === "file:") {
    const workers = dirname(fileURLToPath(entry));
    paths.push(workers, join(dirname(workers), "src", "runtime", "sandbox"));
  }
  if (stepEnv.DENO_DIR !== undefined) paths.push(stepEnv.DENO_DIR);
  return paths;
}

/**
 * The Landlock wrapper: the inner command runs through the confine step,
 * which applies the ruleset (the inner step's `readOnly` paths readable
 * besides the grants) and the seccomp filter, then execs it. The step execs,
 * so the worker keeps the step's pid and exit status.
 *
 * @param options The runner, kernel support, permissions and paths.
 * @returns The wrapper.
 */
export function landlockWrapper(options: LandlockWrapperOptions): Wrapper {
  return {
    // Without Landlock (ABI 0) the step installs the seccomp filter alone.
    name: options.support.landlockAbi > 0 ? "landlock" : "seccomp",
    wrap(inner: LaunchStep): WrappedStep {
      // The step sees none of the worker's variables under their names
      // (a preload in BUN_OPTIONS or LD_PRELOAD would run before
      // confinement); it gives them back at exec. Its own variables go.
      const env: Record<string, string> = {};
      for (const [name, value] of Object.entries(inner.env)) {
        env[`${CONFINE_HELD_ENV_PREFIX}${name}`] = value;
      }
      // What both steps do alike; the runtime step also has variables of
      // its own to drop at exec, and may start the network forwarder.
      const rules = {
        landlockAbi: options.support.landlockAbi,
        seccomp: options.support.seccomp,
        pathMetadata: options.alone === true,
        // Alone, no pid namespace ends the worker's tree with the parent.
        parentDeath: options.alone === true,
        // Inside bubblewrap, a worker without net has a network namespace
        // of its own (only its loopback): listing it is allowed.
        routeNetlink: options.alone !== true,
        ...(options.grants ? { grants: options.grants } : {}),
        permissions: options.permissions,
        executables: options.executables,
        readOnly: inner.readOnly,
        listOnly: inner.listOnly ?? [],
        cwd: options.cwd,
        argv: inner.argv,
      };
      const native = options.native;
      if (native !== undefined) {
        // No runtime starts: no variables of its own, nothing of it to read.
        const spec = confineSpec({ ...rules, env: {} });
        const net = options.forwarder === undefined ? undefined : {
          socket: NET_SOCKET_IN_SANDBOX,
          listeners: options.forwarder.listeners,
        };
        return {
          argv: nativeConfineArgv(NATIVE_CONFINE_PATH, spec, {
            pdeathsig: options.parentDeath === true,
            ...(net === undefined ? {} : { net }),
          }),
          env,
          readOnly: inner.readOnly,
          embedded: { path: NATIVE_CONFINE_PATH, bytes: native },
        };
      }
      const changes: Record<string, string | null> = {};
      for (const name of Object.keys(options.stepEnv)) changes[name] = null;
      const spec = confineSpec({
        ...rules,
        env: changes,
        ...(options.forwarder === undefined ? {} : {
          forwarder: {
            ...forwarderCommand(
              options.runner,
              options.forwarder,
              options.stepEnv.DENO_DIR,
            ),
            ...localAddressesOf(options.forwarder),
          },
        }),
      });
      return {
        argv: confinedArgv(options.runner, spec),
        env: { ...env, ...options.stepEnv },
        readOnly: [
          ...stepReadOnly(options.runner, options.stepEnv),
          ...inner.readOnly,
        ],
      };
    },
  };
}

/** Options of {@linkcode bindFdsWrapper}. */
export interface BindFdsWrapperOptions {
  /** The runtime that runs the confine step. */
  runner: ConfineRunner;
  /** The step's own variables (see {@linkcode stepEnvironment}). */
  stepEnv: Readonly<Record<string, string>>;
}

/**
 * The wrapper around bubblewrap that opens the grants a worker may have
 * made or swapped (bubblewrap's argv holds `BIND_FD_PLACEHOLDER<path>`
 * where their descriptors go): the confine step's `--bind-fds` form opens
 * each without following links, fills in the numbers and execs bubblewrap,
 * which binds exactly those. Its environment is held as the confine step's
 * (no variable acts on the step's runtime) and given back at `execve`.
 *
 * @param options The runner and its variables.
 * @returns The wrapper.
 */
export function bindFdsWrapper(options: BindFdsWrapperOptions): Wrapper {
  return {
    name: "bind-fds",
    wrap(inner: LaunchStep): WrappedStep {
      const argv = [...inner.argv];
      const fds: { path: string; arg: number }[] = [];
      argv.forEach((arg, index) => {
        if (arg.startsWith(BIND_FD_PLACEHOLDER)) {
          fds.push({ path: arg.slice(BIND_FD_PLACEHOLDER.length), arg: index });
          argv[index] = "-1";
        }
      });
      const env: Record<string, string> = {};
      for (const [name, value] of Object.entries(inner.env)) {
        env[`${CONFINE_HELD_ENV_PREFIX}${name}`] = value;
      }
      const changes: Record<string, string | null> = {};
      for (const name of Object.keys(options.stepEnv)) changes[name] = null;
      const spec: BindFdsSpec = {
        v: CONFINE_SPEC_VERSION,
        fds,
        argv,
        env: changes,
      };
      return {
        argv: confineStepArgv(options.runner, [
          BIND_FDS_FLAG,
          JSON.stringify(spec),
        ]),
        env: { ...env, ...options.stepEnv },
        readOnly: inner.readOnly,
      };
    },
  };
}

/** The forwarder's addresses to add to loopback, as the runtime step reads them. */
function localAddressesOf(
  layout: NetLayout,
): { localAddresses?: string[] } {
  const local = sandboxLocalAddresses(layout).map((address) =>
    addressHex(address) as string
  );
  return local.length === 0 ? {} : { localAddresses: local };
}
