/**
 * The shared types of launching a worker: what the command builder needs
 * of the resolved options, the finished command, and the wrapper contract
 * every layer around a local worker (sandbox backends, the parent-death
 * guard) implements. Private to src/runtime.
 *
 * @module
 */

import type { NetBroker } from "../sandbox/net/broker.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import type { ExitStatus, RuntimeName, SpawnRequest } from "../types.ts";
import type { ResolvedLauncher, WorkerTransport } from "./transport.ts";
import type { SandboxBackend, SandboxMode } from "../sandbox/types.ts";
import type { WorkerLimits } from "../sandbox/limits/worker_limits.ts";
import type { ResolvedLimits } from "../sandbox/limits/types.ts";

/** Maps the exit status of the spawned process to the worker's own. */
export type ExitMapper = (
  code: number | null,
  signal: string | null,
) => ExitStatus;

/** What {@linkcode buildWorkerCommand} needs of the resolved options. */
export interface WorkerCommandInput {
  /** The user's module, or `undefined` with `command`. */
  moduleUrl: URL | undefined;
  /** Display name. */
  label: string;
  /** The worker runtime. */
  runtime: RuntimeName;
  /** Resolved permissions. */
  permissions: ResolvedPermissions;
  /** Sandbox mode. */
  sandbox: SandboxMode;
  /** The worker's environment (as the user gave it). */
  env: Record<string, string>;
  /** Working directory. */
  cwd: string;
  /** Deno config path. */
  config: string | undefined;
  /** A custom command instead of a module. */
  command: readonly string[] | undefined;
  /** The launcher (an argv prefix or a transport); `undefined`: the worker runs here. */
  launcher: ResolvedLauncher | undefined;
  /** Kernel-enforced limits (`undefined`: none at all, a test's command). */
  limits?: ResolvedLimits | undefined;
}

/** A worker command, ready to spawn. */
export interface WorkerCommand {
  /** The worker module's (or command's) display name, for messages. */
  module: string;
  /**
   * What to spawn here, or, with `transport`, what the transport is asked
   * to start.
   */
  spawn: SpawnRequest;
  /**
   * The transport that starts the worker elsewhere (a launcher); omitted:
   * `spawn` runs here.
   */
  transport?: WorkerTransport;
  /** Whether the worker runs on this machine (its pid can be inspected). */
  local: boolean;
  /** The wrappers around the worker, outermost first (e.g. `["setpriv", "bwrap"]`). */
  wrappers: readonly string[];
  /**
   * The OS sandbox backends confining the worker, outermost first:
   * `["bwrap", "landlock"]` (both), `["landlock"]` (where bubblewrap cannot
   * run), `["bwrap"]` (where Landlock cannot), or `[]` (not sandboxed). For
   * `stats()` and the start event.
   */
  sandboxes: readonly SandboxBackend[];
  /** Maps the spawned process's exit status to the worker's (undoes a wrapper's 128 + N). */
  mapExit: ExitMapper;
  /**
   * The worker's kernel-enforced limits: which mechanism holds each, its
   * cgroup (released when the worker is gone), which limit ended it.
   * Omitted: none (a command built for a test).
   */
  limits?: WorkerLimits;
  /**
   * The worker's real pid on this machine, found from the pid of the spawned
   * process (a sandbox's pid when wrapped), never from anything the worker
   * says. `undefined` when it cannot be known (a launcher, or the process is
   * gone); call it once the worker is ready.
   */
  workerPid(spawnPid: number): number | undefined;
  /**
   * The private code cache a sandboxed Deno worker reads (read-only), which
   * the parent warms before starting it (launch/warm_up.ts). Omitted: none.
   */
  codeCache?: string;
  /**
   * The broker of the worker's forwarded network (`host:port` grants under
   * bubblewrap): await its `listening` before the spawn and its `ready`
   * before the worker's first call, give it the worker's pid, close it when
   * the worker is gone. Omitted: none.
   */
  network?: NetBroker;
  /**
   * The pid namespace the parent's sandboxed workers share, when the worker
   * joins it: the programs that make it. The start acquires it
   * (`acquirePidNamespace`), binds the holder's pid into `spawn.argv`
   * (`bindPidNamespace`) and releases it once the worker has exited.
   * Omitted: the worker needs none.
   */
  pidNamespace?: { bwrap: string; shell: string; setpriv: string | undefined };
}

/** One step of a launch: a command line with its environment. */
export interface LaunchStep {
  /** The program and its arguments. */
  argv: string[];
  /** The whole environment of the program. */
  env: Record<string, string>;
  /**
   * Absolute paths the program must be able to read to run (its binary,
   * the worker's code, a wrapper's own program): what a sandbox mounts
   * read-only besides the grants.
   */
  readOnly: readonly string[];
  /**
   * Absolute directories the program must be able to list, not read beneath
   * (airlock's root for Bun, whose resolver lists the directory of an
   * imported file): a Landlock rule allows only listing them (and the
   * directories beneath). A mount sandbox needs nothing more: its mounts
   * make those entries visible. Omitted: none.
   */
  listOnly?: readonly string[];
  /**
   * Absolute paths the program must be able to write besides the grants
   * (a Deno worker's private code cache). Omitted: none.
   */
  writable?: readonly string[];
  /**
   * Absolute paths inside `writable` that must start empty and not outlive
   * the process (Deno's web storage). Omitted: none.
   */
  scratch?: readonly string[];
  /**
   * A program that exists only as bytes (the native confine step): the
   * sandbox around the step creates it at `path`, read-only and
   * executable, from the bytes the spawned process reads on descriptor 3
   * (`extraInput`). Omitted: none.
   */
  embedded?: { readonly path: string; readonly bytes: Uint8Array };
  /**
   * Bytes for the spawned process's descriptor 3 (then end of file): how
   * an `embedded` program reaches the sandbox that creates it, without a
   * file. Omitted: descriptor 3 is not open.
   */
  extraInput?: Uint8Array;
}

/** What a wrapper made of a step. */
export interface WrappedStep extends LaunchStep {
  /**
   * How the wrapper reports the inner program's exit (omitted: as it is).
   * Mappers apply outermost first.
   */
  mapExit?: ExitMapper;
  /**
   * How many generations of processes lie between the wrapper's process and
   * the inner program (bubblewrap forks: 1; with a pid namespace its init
   * forks again: 2). Omitted: 0, the wrapper execs the inner program.
   */
  levels?: number;
  /**
   * The programs that make the pid namespace the parent's workers share,
   * when the wrapper joins it (`sandbox/pid_namespace.ts`): the start
   * acquires it and binds its holder's pid into the argv. Omitted: none.
   */
  pidNamespace?: { bwrap: string; shell: string };
}

/**
 * One layer around a worker command: takes the inner step's argv and env,
 * returns the wrapping argv and env. Wrappers run innermost first: a
 * Landlock step inside bubblewrap, bubblewrap inside `setpriv`.
 */
export interface Wrapper {
  /** A short name for diagnostics (`"bwrap"`, `"setpriv"`). */
  readonly name: string;
  /**
   * Whether what it wraps dies with the parent by other means, so that no
   * parent-death guard (`setpriv --pdeathsig`) goes around it: bubblewrap
   * joining the pid namespace the parent's workers share, whose holder dies
   * with the parent and takes every process in it along. A parent-death
   * signal on that bubblewrap would orphan the worker to the host's init,
   * and the namespace's end would wait for that init to reap it (1 to 2 s
   * here). Omitted: false.
   */
  readonly diesWithParent?: boolean;
  /**
   * The programs of the shared pid namespace it joins, known before it
   * wraps anything: the start begins the namespace's holder while the rest
   * of the build runs. Omitted: it joins none.
   */
  readonly pidNamespace?: { readonly bwrap: string; readonly shell: string };
  /** Wraps the inner step. */
  wrap(inner: LaunchStep): WrappedStep;
}
