/**
 * The parent's side of the confine step: the command line that runs
 * `workers/confine.ts` on a runtime (the worker's own, or the parent's for a
 * `command` worker) with the spec of one worker (or `--probe`: the probe of
 * what the kernel offers is in `facts.ts`).
 *
 * @module
 */

import { Buffer, fileURLToPath, process } from "../node_builtins.ts";
import type { RuntimeName } from "../types.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import { type GrantPaths, landlockRuleset } from "./landlock.ts";
import { seccompArch, seccompFilter } from "./seccomp.ts";
import {
  CONFINE_SPEC_VERSION,
  type ConfineSpec,
  encodeConfineSpec,
} from "./spec.ts";

/** A runtime that runs the confine step. */
export interface ConfineRunner {
  /** Which runtime. */
  runtime: RuntimeName;
  /** Its binary (real path). */
  binary: string;
}

/**
 * The URL of `workers/confine.ts` (or `.js` where airlock was installed as
 * transpiled JavaScript).
 *
 * @returns The step's URL.
 */
export function confineEntryUrl(): URL {
  const here = import.meta.url;
  const extension = here.endsWith(".js") ? "js" : "ts";
  return new URL(`../../../workers/confine.${extension}`, here);
}

/**
 * The command that runs the confine step with one argument. Deno runs it with
 * every permission (it is airlock's code, and it runs before the worker) and
 * no config file; Bun without `.env` files and without a `bunfig.toml` (a
 * preload in the worker's directory would run in the step, unconfined).
 * Spawn it with the worker's environment and working directory: it passes
 * both on to the worker, with the spec's `env` changes.
 *
 * @param runner The runtime to run the step.
 * @param argument The encoded spec, or `--probe`, or the arguments of the
 *   `--bind-fds` form.
 * @returns The argv.
 *
 * @example
 * ```ts
 * import { confineStepArgv } from "./confine_command.ts";
 * import assert from "node:assert/strict";
 *
 * const argv = confineStepArgv({ runtime: "bun", binary: "/usr/bin/bun" }, "--probe");
 * assert.equal(argv[0], "/usr/bin/bun");
 * assert.equal(argv.at(-1), "--probe");
 * ```
 */
export function confineStepArgv(
  runner: ConfineRunner,
  argument: string | readonly string[],
): string[] {
  const args = typeof argument === "string" ? [argument] : [...argument];
  const url = confineEntryUrl();
  const entry = url.protocol === "file:" ? fileURLToPath(url) : url.href;
  if (runner.runtime === "deno") {
    return [
      runner.binary,
      "run",
      "-A",
      "--no-config",
      "--no-lock",
      "--quiet",
      entry,
      ...args,
    ];
  }
  // A bunfig.toml in the working directory could preload code into the
  // step, before it confines anything: read no config file at all.
  return [
    runner.binary,
    "--no-env-file",
    "--config=/dev/null",
    entry,
    ...args,
  ];
}

/** What the kernel offers the confine step. */
export interface ConfineSupport {
  /** The Landlock ABI version (0: no Landlock). */
  landlockAbi: number;
  /** Whether seccomp filters can be installed. */
  seccomp: boolean;
  /** Why the probe could not run, when it could not (both fields are then 0 / false). */
  error?: string;
}

/** Options of {@linkcode confineSpec}. */
export interface ConfineSpecOptions {
  /** The kernel's Landlock ABI (0: apply no Landlock ruleset). */
  landlockAbi: number;
  /** Whether to install the seccomp filter. */
  seccomp: boolean;
  /**
   * Whether the filter refuses the path-based metadata calls (where
   * Landlock is the only backend: see `SeccompFilterOptions.pathMetadata`).
   *
   * @default {false}
   */
  pathMetadata?: boolean;
  /**
   * Whether the filter keeps the worker from outliving its parent by
   * itself (where Landlock is alone: see `SeccompFilterOptions.parentDeath`).
   *
   * @default {false}
   */
  parentDeath?: boolean;
  /**
   * Whether the filter allows routing netlink without `net` (a network
   * namespace of the worker's own: see `SeccompFilterOptions.routeNetlink`).
   *
   * @default {false}
   */
  routeNetlink?: boolean;
  /**
   * How the parent resolved the grants (see `LandlockRulesetOptions.grants`).
   *
   * @default {undefined}
   */
  grants?: GrantPaths;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** Programs and installations the worker runs from (read and execute). */
  executables: readonly string[];
  /** The worker's code (read-only). */
  readOnly: readonly string[];
  /**
   * Directories the worker may list only (see `LandlockRulesetOptions`).
   *
   * @default {[]}
   */
  listOnly?: readonly string[];
  /** The worker's working directory. */
  cwd: string;
  /** The worker's command. */
  argv: readonly string[];
  /**
   * Changes from the step's environment to the worker's (see
   * {@linkcode ConfineSpec} `env`).
   *
   * @default {{}}
   */
  env?: Readonly<Record<string, string | null>>;
  /**
   * A program the step starts before confining itself (see
   * {@linkcode ConfineSpec} `forwarder`).
   *
   * @default {undefined}
   */
  forwarder?: ConfineSpec["forwarder"];
}

/**
 * The spec of one worker's confine step: its Landlock ruleset, its seccomp
 * filter, its directory and command.
 *
 * @param options What to confine and how.
 * @returns The spec.
 * @throws {RangeError} when a path is relative or the architecture has no
 * seccomp table.
 *
 * @example
 * ```ts
 * import { confineSpec } from "./confine_command.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = confineSpec({
 *   landlockAbi: 6,
 *   seccomp: false,
 *   permissions: resolvePermissions({ read: ["/data"] }, "/app"),
 *   executables: ["/usr/bin/python3"],
 *   readOnly: ["/app"],
 *   cwd: "/app",
 *   argv: ["/usr/bin/python3", "/app/worker.py"],
 * });
 * assert.equal(spec.seccomp, "");
 * assert.ok(spec.landlock?.paths.some((rule) => rule.path === "/data"));
 * ```
 */
export function confineSpec(options: ConfineSpecOptions): ConfineSpec {
  const arch = seccompArch(process.arch);
  if (options.seccomp && arch === undefined) {
    throw new RangeError(
      `Cannot build the seccomp filter: no system call table for architecture "${process.arch}" (known: x64, arm64)`,
    );
  }
  return {
    v: CONFINE_SPEC_VERSION,
    cwd: options.cwd,
    landlock: options.landlockAbi > 0
      ? landlockRuleset({
        abi: options.landlockAbi,
        permissions: options.permissions,
        executables: options.executables,
        readOnly: options.readOnly,
        listOnly: options.listOnly ?? [],
        ...(options.grants ? { grants: options.grants } : {}),
      })
      : null,
    seccomp: options.seccomp && arch !== undefined
      ? Buffer.from(
        seccompFilter(options.permissions, {
          arch,
          pathMetadata: options.pathMetadata === true,
          routeNetlink: options.routeNetlink === true,
          parentDeath: options.parentDeath === true,
        }),
      ).toString("base64")
      : "",
    argv: [...options.argv],
    env: { ...options.env },
    ...(options.forwarder === undefined
      ? {}
      : { forwarder: options.forwarder }),
  };
}

/**
 * The whole confined command: the step on `runner`, with the spec as its
 * argument.
 *
 * @param runner The runtime to run the step.
 * @param spec The spec.
 * @returns The argv.
 */
export function confinedArgv(
  runner: ConfineRunner,
  spec: ConfineSpec,
): string[] {
  return confineStepArgv(runner, encodeConfineSpec(spec));
}
