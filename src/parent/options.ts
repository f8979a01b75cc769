/**
 * The public option types of `oneShot`, `session` and `pool`, with every
 * default in one documented object ({@linkcode DEFAULTS}) and the known-key
 * lists derived from the types. Validation and resolution live in
 * `_resolve_options.ts`; the checks themselves in `src/_validate.ts`.
 *
 * @module
 */

import { availableParallelism } from "../runtime/node_builtins.ts";
import type { RuntimeName } from "../runtime/types.ts";
import type {
  LauncherOption,
  ResolvedLauncher,
} from "../runtime/launch/transport.ts";
import type { LogSink } from "./_log_sink.ts";
import type {
  PermissionsOption,
  ResolvedPermissions,
} from "../runtime/permissions.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../protocol/frame_header.ts";
import type { StateOptions } from "./state_scope.ts";
import type { HandlersOf, OpOf } from "./proxy.ts";
import { SANDBOX_MODES, type SandboxMode } from "../runtime/sandbox/types.ts";
import type {
  LimitsOption,
  ResolvedLimits,
} from "../runtime/sandbox/limits/types.ts";

/** Where the worker runs and with which runtime. */
export type RuntimeOption = "deno" | "bun" | "auto";

/** Which OS-level sandbox wraps the worker (one definition: `SandboxMode`). */
export type SandboxOption = SandboxMode;

/** The accepted values of `runtime`. */
export const RUNTIME_OPTIONS: readonly RuntimeOption[] = [
  "deno",
  "bun",
  "auto",
];

/** The accepted values of `sandbox`. */
export const SANDBOX_OPTIONS: readonly SandboxOption[] = SANDBOX_MODES;

/**
 * One setup call: the op's name, then each argument as its own element:
 * `["open", "./data/app.db"]` calls `open("./data/app.db")` (not
 * `["open", ["./data/app.db"]]`, which would pass one array). With the
 * worker's type known (`session<typeof db>(...)`), op names and argument
 * types are checked: a wrong one does not type-check.
 *
 * @typeParam D The worker module's default export type, or `unknown`.
 */
export type SetupCall<D = unknown> = unknown extends D
  ? readonly [string, ...unknown[]]
  : {
    [K in OpOf<D>]: readonly [
      K,
      ...(HandlersOf<D>[K] extends (...args: infer A) => unknown ? A : never),
    ];
  }[OpOf<D>];

/** Who wrote a log line: what `onStderr` receives beside the line. */
export interface LogSource {
  /** The worker module (or command). */
  module: string;
  /** The worker's pid. */
  pid: number;
  /** `"stderr"`, or `"stdout"` for stray bytes on the frame stream. */
  stream: "stderr" | "stdout";
}

/**
 * Options every mode takes.
 *
 * @typeParam D The worker module's default export type (types `setup`).
 */
export interface WorkerOptions<D = unknown> {
  /**
   * The runtime that runs the worker: `"deno"`, `"bun"`, or `"auto"` for the
   * parent's own. The other runtime's binary is looked up on `PATH`, then in
   * `node_modules/.bin` above the current directory and above the worker
   * module; a missing one fails with `WorkerStartError` (`failure: "spawn"`).
   *
   * @default {"auto"}
   */
  runtime?: RuntimeOption;
  /**
   * What the worker may touch: `{ read, write, net, env, run, ffi, sys }`,
   * each a list of scopes or `true`; `"all"` grants everything. Nothing is
   * granted by default, on both runtimes. See docs/permissions.md.
   *
   * @default {{}}
   */
  permissions?: PermissionsOption;
  /**
   * The OS sandbox (on Linux: bubblewrap and Landlock) that confines the
   * whole worker process, native code included:
   * `"os"` requires it, `"none"` never uses it, `"auto"` uses it wherever it
   * is available, on both runtimes. Where it is not, a Bun or `command`
   * worker refuses to start with `PermissionError` unless
   * `permissions.enforce` is `"best-effort"`. See docs/permissions.md.
   *
   * @default {"auto"}
   */
  sandbox?: SandboxOption;
  /**
   * What the worker's process tree may use, enforced by the kernel:
   * `memoryBytes` (bytes of the whole tree, native allocations included) and
   * `processes` (processes and threads) by a cgroup, `cpuSeconds` (seconds
   * of CPU time), `fileSizeBytes` (bytes of the largest file written) and
   * `openFiles` (descriptors) by rlimits set before the worker runs any code.
   * When the kernel ends a worker at a limit, the call rejects with
   * `WorkerCrashedError` whose `limit` names the key. Even without this
   * option a worker holds at most 512 processes and threads (16 per core
   * where that is more), where a cgroup can hold them. Under `enforce:
   * "strict"` (the default) a limit that cannot be enforced here refuses
   * the start with `PermissionError`; `stats().limits` says which mechanism
   * holds each. See docs/operations.md ("Limits").
   *
   * @default {{ processes: 512, enforce: "strict" }}
   */
  limits?: LimitsOption;
  /**
   * Environment variables of the worker. The parent's environment is not
   * inherited; see `inheritEnv`.
   *
   * @default {{}}
   */
  env?: Readonly<Record<string, string>>;
  /**
   * Names of the parent's environment variables passed through to the
   * worker (when set), or `true` for all of them.
   *
   * @default {[]}
   */
  inheritEnv?: readonly string[] | boolean;
  /**
   * The worker's working directory; relative permission paths resolve
   * against it.
   *
   * @default {the parent's working directory}
   */
  cwd?: string | URL;
  /**
   * Deno only: the `deno.json` the worker uses for import maps and npm
   * resolution. By default the nearest `deno.json`/`deno.jsonc` above the
   * worker module is used, as Deno would for the user's own program.
   *
   * @default {the nearest config above the module}
   */
  config?: string | URL;
  /**
   * Deadline of each call, in milliseconds, counted from when the call is
   * written to the worker (not while it waits for a worker; a write that
   * cannot complete because the worker stopped reading counts). A call past
   * it rejects with
   * `WorkerTimeoutError`; a worker that then does not answer the liveness
   * check within 1 s (its event loop blocked), or times out twice in a row,
   * is replaced. `0` disables it.
   * Overridable per call.
   *
   * @default {300000}
   */
  callTimeoutMs?: number;
  /**
   * Deadline for a worker to be ready (spawn, import, hello and `setup`), in
   * milliseconds. Past it the start fails with `WorkerTimeoutError`. A
   * sandboxed Deno worker's first start of a module in a process also waits
   * this long at most for its code cache's warm-up (docs/permissions.md).
   *
   * @default {60000}
   */
  startTimeoutMs?: number;
  /**
   * How many times a worker that dies during start or setup is respawned
   * before calls fail with `WorkerStartError` (`failure: "retries"`), and
   * how many times a call to an idempotent op lost in a crash is retried.
   *
   * @default {2}
   */
  maxRetries?: number;
  /**
   * Calls run on every new worker before any other call, each an op name
   * followed by its arguments, e.g. `[["open", "./data/app.db"]]`. A failing
   * setup call fails the start. Checked against the worker's handlers when
   * its type is given.
   *
   * @default {[]}
   */
  setup?: readonly SetupCall<D>[];
  /**
   * Ops that are safe to run twice (in addition to those the worker declares
   * in `defineWorker`). Only these are retried when a worker dies while
   * running them.
   *
   * @default {[]}
   */
  idempotent?: readonly string[];
  /**
   * How long a cancelled call may keep running in the worker before the
   * worker is killed and replaced, in milliseconds.
   *
   * @default {5000}
   */
  cancelGraceMs?: number;
  /**
   * How long `close()` and `restart()` wait for the worker to exit after
   * asking it, and again after SIGTERM, before SIGKILL, in milliseconds.
   *
   * @default {5000}
   */
  closeGraceMs?: number;
  /**
   * Receives each line the worker writes to stderr, and stray text on its
   * stdout, as the worker wrote it (without the newline; a line longer than
   * 8,192 characters arrives in pieces of that length). By default lines go
   * to the parent's stderr, prefixed with the module name and pid, with
   * terminal control characters (escape sequences, `\r`, bidirectional
   * overrides) shown escaped; a sink of your own that prints lines should
   * escape them too.
   *
   * @default {prefix and write to stderr}
   */
  onStderr?: (line: string, source: LogSource) => void;
  /**
   * Largest frame accepted from the worker, in bytes; a larger one is a
   * `ProtocolError` and the worker is replaced.
   *
   * @default {268435456}
   */
  maxFrameBytes?: number;
  /**
   * Run this executable instead of a TypeScript module: an argv array of a
   * program that speaks the protocol (docs/PROTOCOL.md), e.g. a Python
   * worker. `runtime` does not apply to it; `permissions` and `sandbox` do,
   * enforced by the OS sandbox alone (a command has no permission model of
   * its own, like Bun): see docs/python.md.
   *
   * @default {undefined}
   */
  command?: readonly string[];
  /**
   * Run the worker elsewhere: a prefix for the worker command
   * (`["ssh", "host", "--"]`, `["docker", "exec", "-i", "ctr"]`), run as a
   * local process, or a transport (`WorkerTransport`) that starts the command
   * somewhere and hands back its stdio, exit and a way to end it (the
   * Kubernetes API's exec, a container engine's API: no local CLI). A start
   * that fails is a `WorkerStartError` (`failure: "spawn"`) naming it.
   * Permissions, limits and the sandbox are then the remote side's job:
   * `limits` are refused under `enforce: "strict"`, the OS sandbox does not
   * apply. See docs/remote.md.
   *
   * @default {[]}
   */
  launcher?: LauncherOption;
}

/** A sticky routing key of a pool call: a string or a number. */
export type CallKey = string | number;

/** Options of one call. */
export interface CallOptions {
  /**
   * Pools only: calls with the same key run on the same live worker (so a
   * client that caches per shard or tenant stays warm). A new key goes to
   * the least busy worker; a call whose worker is busy waits for it rather
   * than run elsewhere, while calls without a key (or with other keys) pass
   * it. When that worker retires or crashes the key moves to another. Sessions
   * and one-shot runners ignore it. See docs/modes.md.
   *
   * @default {the pool's `route(op, args)`, if any}
   */
  key?: CallKey;
  /**
   * Aborting it rejects the call with `signal.reason` and cancels it in the
   * worker (a stream: ends it, the generator's `finally` blocks run).
   */
  signal?: AbortSignal;
  /**
   * This call's deadline in milliseconds, counted from when it is written
   * to a worker; `0` disables it. For a streaming call it bounds the gap
   * between values: the time the parent waits for the next value while it
   * holds none (time the consumer spends on values it holds does not
   * count). Passing it rejects with `WorkerTimeoutError`.
   *
   * @default {the mode's `callTimeoutMs`}
   */
  timeoutMs?: number;
  /**
   * A deadline for the whole call in milliseconds, from the call to its
   * answer (a stream: to its end), queueing included; `0` disables it.
   * Passing it rejects with `WorkerTimeoutError` and cancels the call in the
   * worker.
   *
   * @default {0}
   */
  totalTimeoutMs?: number;
  /**
   * Receives what the handler reports with `this.progress(value)`, while
   * the call runs. The worker throttles reports to one every 50 ms (the
   * latest value wins; the last one arrives before the answer). A throwing
   * callback does not affect the call.
   *
   * @default {undefined}
   */
  onProgress?: (value: unknown) => void;
  /**
   * A streaming call: values the worker may send ahead of what the consumer
   * has taken (a whole number ≥ 1). The parent never holds more.
   *
   * @default {1024}
   */
  windowItems?: number;
  /**
   * A streaming call: payload bytes the worker may send ahead of what the
   * consumer has taken (a whole number ≥ 1). The parent holds at most this
   * plus one message.
   *
   * @default {4194304 (4 MiB)}
   */
  windowBytes?: number;
  /**
   * When a call that times out or is aborted while its handler runs
   * rejects. `"now"`: at once, while the handler may still be running (it
   * is told to stop through `this.signal`, and the worker is ended if it has
   * not stopped after `cancelGraceMs`). `"stopped"`: only once the handler is
   * no longer running anywhere: the worker answered the cancel (the handler
   * returned, threw, or had not started), or it is gone, ended by airlock
   * after `cancelGraceMs`. Use `"stopped"` for writes, so that no effect of
   * the call happens after its rejection and a retry cannot run beside it;
   * keep `"now"` for reads, where the caller wants the error at once and a
   * late effect does not matter. The error's `executed` then says what the
   * handler did: `"no"` (never started), `"yes"` (it ran to its end) or
   * `"maybe"` (the worker was ended while it ran). See docs/reliability.md.
   *
   * @default {"now"}
   */
  settle?: "now" | "stopped";
}

/**
 * Options of {@linkcode oneShot}.
 *
 * @typeParam D The worker module's default export type (types `setup`).
 */
export interface OneShotOptions<D = unknown>
  extends WorkerOptions<D>, StateOptions {
  /**
   * Processes kept started and imported ahead of calls (runtime, airlock and
   * the worker module loaded; `setup` not run, no handler called). A call
   * takes a spare, runs `setup` and its op there, and the process exits as
   * without spares; a new spare starts in the background. Spares start when
   * the runner is created; a spare whose `watch` paths or `scope` changed
   * since it started is discarded, not used. Idle spares do not keep the
   * parent alive; `close()` stops them. See docs/modes.md.
   *
   * @default {0}
   */
  spares?: number;
  /**
   * Bounds a plain `close()` (and `await using`), in milliseconds: calls
   * still running when it passes are ended as with `close({ force: true })`
   * (they reject with `SessionClosedError`, their processes are killed) and
   * `close()` resolves once the processes are gone. `0` lets `close()` wait
   * for every call made, however long it runs.
   *
   * @default {0}
   */
  closeTimeoutMs?: number;
}

/**
 * Options of {@linkcode session}.
 *
 * @typeParam D The worker module's default export type (types `setup`).
 */
export interface SessionOptions<D = unknown>
  extends WorkerOptions<D>, StateOptions {
  /**
   * Bounds a plain `close()` (and `await using`), in milliseconds: calls
   * still running when it passes are ended as with `close({ force: true })`
   * (they reject with `SessionClosedError`, the workers are killed) and
   * `close()` resolves once the processes are gone. `0` lets `close()` wait
   * for every admitted call, however long it runs (each call is still bound
   * by its own deadline, `callTimeoutMs`).
   *
   * @default {0}
   */
  closeTimeoutMs?: number;
}

/**
 * Options of {@linkcode pool}.
 *
 * @typeParam D The worker module's default export type (types `setup`).
 */
export interface PoolOptions<D = unknown> extends SessionOptions<D> {
  /**
   * Most workers taking calls at once. Processes may briefly outnumber it: a
   * worker retiring (after `maxTasksPerWorker`, `maxRssBytes`, `watch`)
   * finishes the calls it was given beside its replacement, and with
   * `maxTasksPerWorker` each worker may have one replacement started ahead,
   * waiting on standby (it takes no calls, so it does not count toward
   * `max`, until the worker it replaces retires): up to twice `max`
   * processes, plus retiring ones.
   *
   * @default {the available cores, at most 8}
   */
  max?: number;
  /**
   * Workers kept alive against idle reaping (started on demand, or at
   * creation with `prewarm`).
   *
   * @default {0}
   */
  min?: number;
  /**
   * Start workers before the first call: `true` starts `min` workers (at
   * least one), a number starts that many (at most `max`).
   *
   * @default {false}
   */
  prewarm?: boolean | number;
  /**
   * Idle workers above `min` are stopped after this many milliseconds.
   * `0` keeps them until `close()`.
   *
   * @default {60000}
   */
  idleTimeoutMs?: number;
  /**
   * A worker is recycled after this many calls. Its replacement starts in
   * the background once the calls it has left would take about as long as a
   * start (from the last start's time and the worker's pace since its first
   * call, with a margin: with fast calls, at its second call), and at the
   * latest for its last tenth of calls; it waits on standby (no calls, not
   * counted toward `max`, shown as `perWorker[].standby`) and takes over when
   * the worker retires, so calls need not wait for a start. The cost is one
   * more process per worker being replaced (about 40 MiB for a small worker,
   * wrappers included); it is reaped like any idle worker and ends with the
   * pool. `0` turns recycling off.
   *
   * @default {0}
   */
  maxTasksPerWorker?: number;
  /**
   * A worker whose resident memory (the OS figure, which includes native
   * allocations) exceeds this many bytes after a call is recycled: a soft
   * limit, checked between calls (the kernel's hard one is
   * `limits.memoryBytes`). Where a worker's memory cannot be read (a Deno
   * parent without `--allow-all`, which Deno needs to read `/proc`; a
   * launcher; not Linux), `pool()` throws `AirlockError` saying so rather
   * than never recycling. `0` turns it off.
   *
   * @default {0}
   */
  maxRssBytes?: number;
  /**
   * Most calls waiting for a worker; past it a call rejects at once with
   * `PoolBusyError`.
   *
   * @default {10000}
   */
  maxQueue?: number;
  /**
   * Calls one worker runs at once.
   *
   * @default {1}
   */
  concurrency?: number;
  /**
   * The most calls written ahead to a worker whose slots (`concurrency`) are
   * full: they wait in the worker's queue and start the moment a running
   * call ends, without a round trip through the parent. How many a worker is
   * given is adaptive, like a TCP window: it starts at 1, doubles each time
   * the worker is left with nothing queued behind its running calls while
   * calls wait in the pool's queue (so it grows only while the parent cannot
   * keep the worker fed, as with trivial calls), and closes to 0 when the
   * worker's answers come slower than 4 ms per call (then regrows from 1);
   * nothing more is written ahead to a worker that has not answered for
   * 4 ms (its running call may be long).
   * Written-ahead calls' deadlines (`timeoutMs`) start when they start. If
   * the worker crashes,
   * the calls it had not started go back to the queue whatever their op
   * (they never ran). A call written ahead cannot be taken back: it waits for
   * the calls before it on that worker even if another worker becomes free,
   * so a surprise long call holds up at most the window (never more than
   * this many); nothing is written ahead behind a stream that has started.
   * `0` turns it off. Applies to workers speaking message version 3 (the
   * TypeScript and Python workers; see docs/PROTOCOL.md).
   *
   * @default {16}
   */
  pipeline?: number;
  /**
   * The sticky key of a call made without a `key` call option (e.g. through
   * the typed proxy): calls with the same key run on the same live worker.
   * Return `undefined` for a call that may run anywhere. See the `key` call
   * option and docs/modes.md.
   *
   * @default {undefined}
   */
  route?: (op: string, args: readonly unknown[]) => CallKey | undefined;
  /**
   * Several launchers, one per host (each entry what `launcher` takes):
   * workers spread over them, each new worker through the least loaded
   * launcher in service (`stats().perWorker[].launcher` is its index). A
   * launcher whose starts fail twice in a row (a worker that dies unasked
   * within 2 s of its start counts as a failed start) is set aside for a
   * backoff (1 s, doubling up to 30 s), then tried again; meanwhile the
   * others carry the load. A lost host fails its running calls with
   * `WorkerCrashedError` (`executed: "maybe"`; idempotent ones are retried
   * on another worker), and its workers are replaced on the others; when
   * shares differ by two or more (the host is back), one worker at a time
   * moves to the less loaded launcher. With
   * every launcher set aside, calls fail with `WorkerStartError` naming
   * each launcher's last failure. Not with `launcher`. See docs/remote.md.
   *
   * @default {undefined}
   */
  launchers?: readonly LauncherOption[];
}

/**
 * Options of `close()` on a session or a pool.
 */
export interface CloseOptions {
  /**
   * End everything now instead of draining: queued and running calls reject
   * with `SessionClosedError`, the workers are killed (SIGKILL), and
   * `close()` resolves once their processes are gone.
   *
   * @default {false}
   */
  force?: boolean;
  /**
   * Drain for at most this many milliseconds, then end the rest as with
   * `force`. Overrides the `closeTimeoutMs` option for this close; `0` waits
   * for every admitted call.
   *
   * @default {the closeTimeoutMs option}
   */
  timeoutMs?: number;
}

/**
 * Every default of airlock's options, in one place. The `@default` of each
 * option documents the same value; resolution fills a missing option from
 * here and nowhere else.
 */
export const DEFAULTS = Object.freeze(
  {
    /** The parent's own runtime. */
    runtime: "auto",
    /** The OS sandbox wherever it is available, on both runtimes. */
    sandbox: "auto",
    /** A call's deadline once written: 5 minutes. */
    callTimeoutMs: 300_000,
    /** The deadline for a worker to be ready (spawn, load, hello, setup): 60 s. */
    startTimeoutMs: 60_000,
    /** Respawns after a failed start, and retries of a lost idempotent call. */
    maxRetries: 2,
    /** How long a cancelled call may keep running before its worker is killed. */
    cancelGraceMs: 5_000,
    /** How long each step of a shutdown (ask, SIGTERM) may take before the next. */
    closeGraceMs: 5_000,
    /** `close()` waits for every admitted call. */
    closeTimeoutMs: 0,
    /** The largest frame accepted from a worker: 256 MiB. */
    maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
    /**
     * Pool size: the available cores, at least 1 and at most 8. Read when a
     * pool is resolved, not at import (node:os is loaded on first use).
     */
    get max(): number {
      return Math.max(1, Math.min(8, availableParallelism()));
    },
    /** Workers a pool keeps alive against idle reaping. */
    min: 0,
    /** Idle pool workers above `min` are stopped after 60 s. */
    idleTimeoutMs: 60_000,
    /** Pool workers are not recycled after a number of calls. */
    maxTasksPerWorker: 0,
    /** Pool workers are not recycled for their memory. */
    maxRssBytes: 0,
    /** Calls a pool queues before it refuses with `PoolBusyError`. */
    maxQueue: 10_000,
    /** Calls one pool worker runs at once. */
    concurrency: 1,
    /** Most calls written ahead to a busy pool worker. */
    pipeline: 16,
    /** One-shot runners keep no spare processes. */
    spares: 0,
    /**
     * Limits of every worker: 512 processes and threads, or 16 per core
     * where that is more (a runtime alone holds about 7 threads on 2 cores,
     * more on more cores: its thread pools grow with them), and a start that
     * is refused where a limit asked for cannot be enforced.
     */
    limits: {
      get processes(): number {
        return Math.max(512, 16 * availableParallelism());
      },
      enforce: "strict",
    },
  } as const,
);

/** The names of the keys of `T` that `K` lacks (`never` when complete). */
type MissingKeys<T, K extends readonly PropertyKey[]> = Exclude<
  keyof T,
  K[number]
>;

/** Fails type-check (naming the missing keys) unless `K` lists every key of `T`. */
function keyList<T>(): <const K extends readonly (keyof T & string)[]>(
  keys:
    & K
    & ([MissingKeys<T, K>] extends [never] ? unknown : {
      missing: MissingKeys<T, K>;
    }),
) => readonly string[] {
  return (keys) => Object.freeze([...keys]);
}

/** The keys of {@linkcode WorkerOptions}, checked against the type both ways. */
export const WORKER_OPTION_KEYS: readonly string[] = keyList<WorkerOptions>()([
  "runtime",
  "permissions",
  "sandbox",
  "limits",
  "env",
  "inheritEnv",
  "cwd",
  "config",
  "callTimeoutMs",
  "startTimeoutMs",
  "maxRetries",
  "setup",
  "idempotent",
  "cancelGraceMs",
  "closeGraceMs",
  "onStderr",
  "maxFrameBytes",
  "command",
  "launcher",
]);

/** The keys of {@linkcode SessionOptions}. */
export const SESSION_OPTION_KEYS: readonly string[] = keyList<
  SessionOptions
>()([
  ...(WORKER_OPTION_KEYS as readonly (keyof WorkerOptions)[]),
  "watch",
  "scope",
  "closeTimeoutMs",
]);

/** The keys of {@linkcode OneShotOptions}. */
export const ONE_SHOT_OPTION_KEYS: readonly string[] = keyList<
  OneShotOptions
>()([
  ...(WORKER_OPTION_KEYS as readonly (keyof WorkerOptions)[]),
  "watch",
  "scope",
  "spares",
  "closeTimeoutMs",
]);

/** The keys of {@linkcode PoolOptions}. */
export const POOL_OPTION_KEYS: readonly string[] = keyList<PoolOptions>()([
  ...(SESSION_OPTION_KEYS as readonly (keyof SessionOptions)[]),
  "max",
  "min",
  "prewarm",
  "idleTimeoutMs",
  "maxTasksPerWorker",
  "maxRssBytes",
  "maxQueue",
  "concurrency",
  "pipeline",
  "route",
  "launchers",
]);

/** The keys of the `limits` option ({@linkcode LimitsOption}). */
export const LIMITS_OPTION_KEYS: readonly string[] = keyList<LimitsOption>()([
  "memoryBytes",
  "processes",
  "cpuSeconds",
  "fileSizeBytes",
  "openFiles",
  "enforce",
]);

/** The keys of {@linkcode CloseOptions}. */
export const CLOSE_OPTION_KEYS: readonly string[] = keyList<CloseOptions>()([
  "force",
  "timeoutMs",
]);

/** {@linkcode WorkerOptions} after validation, with every default filled in. */
export interface ResolvedWorkerOptions {
  /** The module URL, or `undefined` with `command`. */
  moduleUrl: URL | undefined;
  /** The display name of the worker, for messages. */
  label: string;
  /** The worker runtime. */
  runtime: RuntimeName;
  /** Resolved permissions. */
  permissions: ResolvedPermissions;
  /** The sandbox mode. */
  sandbox: SandboxOption;
  /** Kernel-enforced limits, with the default `processes` filled in. */
  limits: ResolvedLimits;
  /** The worker's whole environment. */
  env: Record<string, string>;
  /** Absolute working directory. */
  cwd: string;
  /** Deno config path, if any. */
  config: string | undefined;
  /** Call deadline in ms (0: none). */
  callTimeoutMs: number;
  /** Start deadline in ms (0: none). */
  startTimeoutMs: number;
  /** Respawns and retries. */
  maxRetries: number;
  /** Setup calls. */
  setup: SetupCall[];
  /** Parent-declared idempotent ops. */
  idempotent: Set<string>;
  /** Cancel grace in ms. */
  cancelGraceMs: number;
  /** Close grace in ms. */
  closeGraceMs: number;
  /** Bound of a plain close() in ms (0: none). */
  closeTimeoutMs: number;
  /** Log sink. */
  onLog: LogSink;
  /** Frame cap. */
  maxFrameBytes: number;
  /** Custom command, if any. */
  command: string[] | undefined;
  /** The launcher (a non-empty argv prefix or a transport); `undefined`: none. */
  launcher: ResolvedLauncher | undefined;
}

/** {@linkcode PoolOptions} of the pool itself, after validation. */
export interface ResolvedPoolOptions {
  /** Most workers. */
  max: number;
  /** Workers kept against idle reaping. */
  min: number;
  /** Workers started at creation. */
  prewarm: number;
  /** Idle reaping in ms (0: never). */
  idleTimeoutMs: number;
  /** Calls before a worker is recycled (0: never). */
  maxTasksPerWorker: number;
  /** Memory ceiling in bytes (0: none). */
  maxRssBytes: number;
  /** Most queued calls. */
  maxQueue: number;
  /** Calls per worker at once. */
  concurrency: number;
  /** Calls written ahead to a busy worker (0: none). */
  pipeline: number;
  /** The key of a call without a `key` option. */
  route:
    | ((op: string, args: readonly unknown[]) => CallKey | undefined)
    | undefined;
  /** The launchers workers spread over (empty: the one `launcher`). */
  launchers: ResolvedLauncher[];
}
