/**
 * (e)'s baseline: a bare start of the worker's runtime under the very
 * wrappers airlock puts around the worker (setpriv, bubblewrap, the
 * Landlock/seccomp confine step), so a one-shot call is compared with what
 * starting that runtime there costs anyway, as issue 16 defines the target.
 * The worker's command is built by airlock itself for the same options; only
 * the program the runtime runs is swapped for an empty one.
 *
 * @module
 */

import { resolveWorkerOptions } from "../../src/parent/_resolve_options.ts";
import type { WorkerOptions } from "../../src/parent/options.ts";
import { detect } from "../../src/runtime/detect.ts";
import { buildWorkerCommand } from "../../src/runtime/launch/command.ts";
import {
  acquirePidNamespace,
  bindPidNamespace,
} from "../../src/runtime/sandbox/pid_namespace.ts";

/** An empty module Deno loads without any read permission. */
const EMPTY_DENO_MAIN = "data:application/javascript,";

/** A command line and its whole environment. */
export interface BareCommand {
  /** Program and arguments. */
  argv: string[];
  /** The whole environment. */
  env: Record<string, string>;
  /** The wrappers around the runtime, outermost first. */
  wrappers: readonly string[];
  /**
   * The bytes of the spawn's descriptor 3 (the native confine step, which
   * bubblewrap makes into a file): spawn it with airlock's adapter.
   */
  extraInput?: Uint8Array;
  /** Ends the use of the shared pid namespace the command joins, if any. */
  release(): void;
}

/**
 * The runtime's own command inside a wrapper chain, with the worker swapped
 * for an empty program: `bun <entry> <module> [flags]` becomes
 * `bun <empty>`; `deno run … data:<entry>` becomes `deno run … data:,`.
 */
function bareRuntime(argv: readonly string[], empty: string): string[] {
  // workers/entry.ts, or the loader of its pre-bundled copy
  // (workers/bun_loader.ts, src/runtime/bun_entry.ts).
  const entry = argv.findIndex((arg) =>
    /\/workers\/(entry|bun_loader)\.[jt]s$/.test(arg)
  );
  if (entry > 0) return [...argv.slice(0, entry), empty];
  const main = argv.findLastIndex((arg) => arg.startsWith("data:"));
  if (main > 0) return [...argv.slice(0, main), EMPTY_DENO_MAIN];
  throw new Error(
    `Cannot find the worker in its command: ${argv.join(" ").slice(0, 300)}`,
  );
}

/**
 * The same command without the limits step (`sh -c <script> <score>
 * <the groups' join files> -- [prlimit <rlimits> --] <rest>`): what a start
 * would cost without its cgroups, rlimits and oom_score_adj.
 *
 * @param argv A worker's (or bare) command.
 * @returns The command from the sandbox on, or `argv` when it has no step.
 */
export function withoutLimitsStep(argv: readonly string[]): string[] {
  const start = argv.findIndex((arg, i) =>
    arg === "-c" && argv[i + 1]?.includes("oom_score_adj") === true
  );
  if (start < 1) return [...argv];
  const end = argv.indexOf("--", start + 3);
  let rest = argv.slice(end + 1);
  if (rest[0]?.endsWith("/prlimit")) rest = rest.slice(rest.indexOf("--") + 1);
  return [...argv.slice(0, start - 1), ...rest];
}

/**
 * The worker's command for `options`, running an empty program instead of
 * the worker: the same wrappers, mounts, rules and environment.
 *
 * @param module The worker module (its project decides the mounts).
 * @param options The one-shot's options.
 * @param empty The path of an empty script (must lie in the module's
 *   project, which the sandbox mounts).
 * @returns The bare command.
 */
export async function wrappedBareCommand(
  module: URL,
  options: WorkerOptions,
  empty: string,
): Promise<BareCommand> {
  const adapter = detect();
  const command = buildWorkerCommand(
    resolveWorkerOptions(module, options, adapter),
    adapter,
  );
  // A command that joins the parent's shared pid namespace holds a slot for
  // its holder's pid, bound as the real start binds it.
  const lease = command.pidNamespace === undefined
    ? undefined
    : await acquirePidNamespace(
      adapter,
      command.pidNamespace,
      command.module,
    );
  const release = (): void => lease?.release();
  const argv = lease === undefined
    ? [...command.spawn.argv]
    : bindPidNamespace(command.spawn.argv, lease.holderPid);
  // The confine step execs the runtime from a JSON spec after it.
  const confine = argv.findIndex((arg) => arg.endsWith("/workers/confine.ts"));
  if (confine >= 0) {
    const spec = JSON.parse(argv[confine + 1] as string) as {
      argv: string[];
    };
    spec.argv = bareRuntime(spec.argv, empty);
    argv[confine + 1] = JSON.stringify(spec);
    return {
      argv,
      env: { ...command.spawn.env },
      wrappers: command.wrappers,
      release,
    };
  }
  // The native confine step (or no step) ends with the worker's command.
  return {
    argv: bareRuntime(argv, empty),
    env: { ...command.spawn.env },
    wrappers: command.wrappers,
    release,
    ...(command.spawn.extraInput === undefined
      ? {}
      : { extraInput: command.spawn.extraInput }),
  };
}
