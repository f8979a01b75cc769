/**
 * The shared types of kernel-enforced limits: the public `limits` option,
 * its resolved form, the names of the limits and of the mechanisms that can
 * hold them. Pure: no I/O.
 *
 * @module
 */

/**
 * What a worker's process tree may use, enforced by the kernel (cgroups and
 * rlimits); the `limits` option of `oneShot`, `session` and `pool`.
 */
export interface LimitsOption {
  /**
   * Memory of the worker's whole process tree in bytes (the runtime, its
   * threads, native allocations, child processes; page cache it dirties
   * counts too), held by a cgroup. Past it the kernel's out-of-memory killer
   * ends the worker: the call rejects with `WorkerCrashedError` whose
   * `limit` is `"memoryBytes"`, and the next call runs on a fresh worker.
   *
   * @default {undefined (no limit beyond the machine's)}
   */
  memoryBytes?: number;
  /**
   * Processes and threads the worker's tree may hold at once (the runtime's
   * own threads count), held by a cgroup (`pids`). A fork or thread past it
   * fails inside the worker (`EAGAIN`) and the worker keeps answering.
   *
   * @default {512, or 16 per core where that is more (see docs/operations.md)}
   */
  processes?: number;
  /**
   * CPU time of each process of the worker, in seconds, over its whole life
   * (its start included; a pool worker recycled starts again from 0), held
   * by `RLIMIT_CPU`: at the limit the kernel sends `SIGXCPU`, one second
   * later `SIGKILL`; the call rejects with `WorkerCrashedError` whose `limit`
   * is `"cpuSeconds"`. A whole number ≥ 1.
   *
   * @default {undefined (no limit)}
   */
  cpuSeconds?: number;
  /**
   * The largest file a process of the worker may write, in bytes, held by
   * `RLIMIT_FSIZE`: a write past it fails or ends the worker with `SIGXFSZ`
   * (then `limit` is `"fileSizeBytes"`); nothing past the limit reaches the
   * disk.
   *
   * @default {undefined (no limit)}
   */
  fileSizeBytes?: number;
  /**
   * Descriptors each process of the worker may hold open, held by
   * `RLIMIT_NOFILE`: an open past it fails inside the worker (`EMFILE`) and
   * the worker keeps answering. The runtime itself holds about 20.
   *
   * @default {undefined (the parent's own limit)}
   */
  openFiles?: number;
  /**
   * `"strict"` refuses to start a worker (`PermissionError`, naming the
   * cause and the fix) where a limit given here cannot be enforced;
   * `"best-effort"` starts it with what can be, and `stats()` says which
   * mechanism holds each limit (`"none"` for one not held).
   *
   * @default {"strict"}
   */
  enforce?: LimitsEnforce;
}

/** How a limit that cannot be enforced is treated: as permissions.enforce. */
export type LimitsEnforce = "strict" | "best-effort";

/** The accepted values of `limits.enforce`. */
export const LIMITS_ENFORCE: readonly LimitsEnforce[] = [
  "strict",
  "best-effort",
];

/** The name of one limit: a key of {@linkcode LimitsOption} besides `enforce`. */
export type LimitKey =
  | "memoryBytes"
  | "processes"
  | "cpuSeconds"
  | "fileSizeBytes"
  | "openFiles";

/** Every {@linkcode LimitKey}, in the order messages and stats list them. */
export const LIMIT_KEYS: readonly LimitKey[] = [
  "memoryBytes",
  "processes",
  "cpuSeconds",
  "fileSizeBytes",
  "openFiles",
];

/**
 * What holds a limit: a `"cgroup"` (v1 or v2, for memory and processes), an
 * `"rlimit"` (CPU time, file size, descriptors), or `"none"` (not asked, or
 * not enforceable here under `enforce: "best-effort"`).
 */
export type LimitMechanism = "cgroup" | "rlimit" | "none";

/** The `limits` option after validation, with its defaults filled in. */
export interface ResolvedLimits {
  /** Bytes of memory of the tree, or `undefined` for none. */
  memoryBytes: number | undefined;
  /** Processes and threads of the tree (always set: a default applies). */
  processes: number;
  /** Whether `processes` was given (else it is the default). */
  processesGiven: boolean;
  /** CPU seconds per process, or `undefined`. */
  cpuSeconds: number | undefined;
  /** Largest file in bytes, or `undefined`. */
  fileSizeBytes: number | undefined;
  /** Descriptors per process, or `undefined`. */
  openFiles: number | undefined;
  /** Strict or best-effort. */
  enforce: LimitsEnforce;
}

/** Which mechanism holds each limit of a worker: what `stats().limits` shows. */
export type LimitMechanisms = Readonly<Record<LimitKey, LimitMechanism>>;

/** Every limit held by nothing (`stats()` before a worker runs). */
export const NO_MECHANISMS: LimitMechanisms = Object.freeze({
  memoryBytes: "none",
  processes: "none",
  cpuSeconds: "none",
  fileSizeBytes: "none",
  openFiles: "none",
});
