/**
 * Every public error class of airlock. All extend {@linkcode AirlockError},
 * which extends `Error`, so one `instanceof` check catches anything airlock
 * raises on its own account. Callers branch on classes and fields, never on
 * message text.
 *
 * @module
 */

/**
 * Whether the handler of a failed call ran: `"no"`, it never started (the
 * call was queued, not yet written, or written but not started by the
 * worker): safe to retry; `"maybe"`, it had started, so its effects may have
 * happened; `"yes"`, it ran to its end (a `RemoteError` from a handler that
 * threw, or a call that settled only once its handler had finished).
 */
export type CallExecuted = "no" | "maybe" | "yes";

/** Options shared by every airlock error. */
export interface AirlockErrorOptions {
  /** The error that led to this one. */
  cause?: unknown;
}

/**
 * The base class of every error airlock raises on its own account.
 *
 * @example Catch anything airlock raised
 * ```ts
 * import { AirlockError, SessionClosedError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new SessionClosedError({ module: "db.ts" });
 * assert.ok(error instanceof AirlockError);
 * ```
 */
export class AirlockError extends Error {
  /**
   * Whether the handler of the call this error rejected ran (see
   * {@linkcode CallExecuted}); set by airlock on every rejection of a call,
   * `undefined` on an error that rejected no call (a failed `session()`).
   */
  readonly executed: CallExecuted | undefined = undefined;

  /**
   * Creates an airlock error.
   *
   * @param message What failed, led by the failed action.
   * @param options The cause, if any.
   */
  constructor(message: string, options: AirlockErrorOptions = {}) {
    super(message, "cause" in options ? { cause: options.cause } : undefined);
    this.name = "AirlockError";
  }
}

/** Options of {@linkcode RemoteError}. */
export interface RemoteErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command) that threw. */
  module: string;
  /** The op whose handler threw. */
  op: string;
  /** The pid of the worker process that threw. */
  pid: number;
  /** The `name` of the original error (e.g. `"TypeError"`, `"NotCapable"`). */
  remoteName: string;
  /** The `message` of the original error. */
  remoteMessage: string;
  /** The stack of the original error, as the worker printed it. */
  remoteStack?: string | undefined;
  /** Own properties of the original error besides name, message, stack and cause (e.g. `code`). */
  properties?: Record<string, unknown>;
  /** What to change when the error is a denied access, e.g. the grant of `permissions` it needs. */
  hint?: string | undefined;
}

/**
 * A handler threw in the worker. The error keeps the original `name`,
 * `message`, `code` and every other own property, the `cause` chain (rebuilt
 * as errors) and the worker-side stack (`remoteStack`, also appended to
 * `stack`). When the error is an access the worker's grants do not cover
 * (Deno's `NotCapable`, or under the OS sandbox an `ENOENT`, `EROFS`,
 * `EACCES` or failed connection on a path or host outside them), `hint`
 * names the grant of `permissions` to add; the message stays the worker's,
 * and the hint is also shown at the end of `stack`.
 *
 * @example Branch on the original error's fields
 * ```ts
 * import { RemoteError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new RemoteError({
 *   module: "db.ts",
 *   op: "query",
 *   pid: 42,
 *   remoteName: "SqliteError",
 *   remoteMessage: "no such table: t1",
 *   properties: { code: "ERR_SQLITE_ERROR" },
 * });
 * assert.equal(error.name, "SqliteError");
 * assert.equal(error.code, "ERR_SQLITE_ERROR");
 * assert.ok(error instanceof RemoteError);
 * ```
 */
export class RemoteError extends AirlockError {
  /** The worker module (or command) that threw. */
  readonly module: string;
  /** The op whose handler threw. */
  readonly op: string;
  /** The pid of the worker process that threw. */
  readonly pid: number;
  /** The stack of the original error as printed in the worker. */
  readonly remoteStack: string | undefined;
  /** The original error's `code` property, if it had one. */
  readonly code: unknown;
  /** Every own property of the original error besides name, message, stack and cause. */
  readonly properties: Readonly<Record<string, unknown>>;
  /**
   * What to change, when airlock recognised the error as a denied access:
   * the grant of `permissions` it needs (e.g. `permissions.env: ["X"]`).
   */
  readonly hint: string | undefined;
  /** Other own properties of the original error are copied onto this object too. */
  [property: string]: unknown;

  /**
   * Creates a remote error.
   *
   * @param options What the worker reported.
   */
  constructor(options: RemoteErrorOptions) {
    super(options.remoteMessage, options);
    this.name = options.remoteName;
    this.module = options.module;
    this.op = options.op;
    this.pid = options.pid;
    this.remoteStack = options.remoteStack;
    this.hint = options.hint;
    const properties = options.properties ?? {};
    this.properties = properties;
    this.code = properties.code;
    for (const [key, value] of Object.entries(properties)) {
      if (!(key in this)) {
        Object.defineProperty(this, key, {
          value,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
    }
    if (options.remoteStack) {
      this.stack = `${this.stack ?? `${this.name}: ${this.message}`}\n` +
        `    --- in worker "${options.module}" (pid ${options.pid}), op "${options.op}" ---\n` +
        options.remoteStack;
    }
    if (options.hint) {
      this.stack = `${
        this.stack ?? `${this.name}: ${this.message}`
      }\n    hint: ${options.hint}`;
    }
  }
}

/** Options of {@linkcode WorkerCrashedError}. */
export interface WorkerCrashedErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command). */
  module: string;
  /** The worker's pid, if it was known. */
  pid?: number | undefined;
  /** The exit code, or `null` when a signal ended the process. */
  exitCode: number | null;
  /** The name of the signal that ended the process (e.g. `"SIGKILL"`), or `null`. */
  signal: string | null;
  /** The last bytes the worker wrote to stderr (and stray stdout). */
  stderrTail?: string;
  /** The op of the call this error settles, if any. */
  op?: string | undefined;
  /** Why the process stopped, when airlock knows better than the exit status (e.g. "killed because call "x" timed out twice"). */
  reason?: string | undefined;
  /** How many times the call was written to a worker (retries of an idempotent op included). */
  attempts?: number | undefined;
  /** The pid of the worker of each attempt, in order (the last is `pid`). */
  pids?: readonly number[] | undefined;
  /** The limit (a key of the `limits` option) at which the kernel ended the worker, if one did. */
  limit?: LimitBreach | undefined;
}

/**
 * A key of the `limits` option at which a worker ended: the kernel ended it
 * at its memory (the out-of-memory killer in its cgroup), its CPU time
 * (`SIGXCPU`, then `SIGKILL`) or its file size (`SIGXFSZ`); or it died at
 * its process limit (`"processes"`: its cgroup refused a fork or thread,
 * and the runtime, which needs threads of its own, gave up: Deno does).
 */
export type LimitBreach =
  | "memoryBytes"
  | "cpuSeconds"
  | "fileSizeBytes"
  | "processes";

/** What a crash message says of each limit. */
const LIMIT_TEXT: Readonly<Record<LimitBreach, string>> = {
  memoryBytes: "was ended by the kernel at its memory limit",
  cpuSeconds: "was ended by the kernel at its CPU time limit",
  fileSizeBytes: "was ended by the kernel at its file size limit",
  processes:
    "died at its process limit (a thread or process it needed could not be created)",
};

/**
 * Names a likely cause for a signal that ended a worker.
 *
 * @param signal The signal name, e.g. `"SIGKILL"`.
 * @returns A short hint, or `undefined` for signals without one.
 */
function signalHint(signal: string | null): string | undefined {
  switch (signal) {
    case "SIGKILL":
      return "killed from outside or by the out-of-memory killer";
    case "SIGSEGV":
    case "SIGBUS":
      return "a native crash (memory fault) in the worker or a native module it loaded";
    case "SIGABRT":
      return "the worker aborted (a native assertion or abort())";
    case "SIGILL":
    case "SIGFPE":
      return "a native crash (illegal instruction or arithmetic fault)";
    case "SIGTERM":
      return "asked to terminate from outside";
    case "SIGINT":
      return "interrupted (Ctrl-C)";
    case "SIGPIPE":
      return "wrote to a closed pipe";
    default:
      return undefined;
  }
}

function describeExit(exitCode: number | null, signal: string | null): string {
  if (signal) {
    const hint = signalHint(signal);
    return `was killed by ${signal}${hint ? ` (${hint})` : ""}`;
  }
  if (exitCode === null) return "exited";
  return `exited with code ${exitCode}`;
}

function withTail(message: string, stderrTail: string | undefined): string {
  const tail = stderrTail?.trimEnd();
  if (!tail) return message;
  const lines = tail.split("\n").slice(-12).map((line) => `    ${line}`).join(
    "\n",
  );
  return `${message}\n  stderr (tail):\n${lines}`;
}

/**
 * The worker process died while calls were pending, or a call was lost with
 * it. Carries the exit code, the signal name with a hint for common signals,
 * the pid and the tail of the worker's stderr.
 *
 * @example Tell a native crash from an out-of-memory kill
 * ```ts
 * import { WorkerCrashedError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new WorkerCrashedError({
 *   module: "db.ts",
 *   pid: 7,
 *   exitCode: null,
 *   signal: "SIGSEGV",
 * });
 * assert.equal(error.signal, "SIGSEGV");
 * assert.match(error.hint ?? "", /native crash/);
 * ```
 */
export class WorkerCrashedError extends AirlockError {
  /** The worker module (or command). */
  readonly module: string;
  /** The worker's pid, when known. */
  readonly pid: number | undefined;
  /** The exit code, or `null` when a signal ended the process. */
  readonly exitCode: number | null;
  /** The signal name (e.g. `"SIGKILL"`), or `null`. */
  readonly signal: string | null;
  /** A likely cause for the signal, if there is a usual one (none when airlock stopped the worker itself: see `reason`). */
  readonly hint: string | undefined;
  /** The tail of the worker's stderr (about 8 KiB at most). */
  readonly stderrTail: string;
  /** The op of the call this error settled, if any. */
  readonly op: string | undefined;
  /** Why airlock stopped the process, when it did so itself. */
  readonly reason: string | undefined;
  /**
   * How many times the call was written to a worker: more than 1 when an
   * idempotent op was retried after earlier crashes (each lost with its
   * worker); 0 when it never reached one.
   */
  readonly attempts: number;
  /** The pid of the worker of each attempt, in order. */
  readonly pids: readonly number[];
  /**
   * The key of the `limits` option at which the worker ended
   * (`"memoryBytes"`, `"cpuSeconds"`, `"fileSizeBytes"`: the kernel ended
   * it; `"processes"`: its runtime died when a thread or process it needed
   * was refused), or `undefined` when no limit ended it.
   */
  readonly limit: LimitBreach | undefined;

  /**
   * Creates a crash report.
   *
   * @param options What is known of the exit.
   */
  constructor(options: WorkerCrashedErrorOptions) {
    const pids = options.pids ?? [];
    const attempts = options.attempts ?? pids.length;
    const tries = attempts > 1
      ? ` after ${attempts} attempts${
        pids.length > 0 ? ` (on pids ${pids.join(", ")})` : ""
      }`
      : "";
    const what = options.op
      ? `Call "${options.op}" failed${tries}`
      : "Worker failed";
    const pid = options.pid === undefined ? "" : ` (pid ${options.pid})`;
    // When airlock stopped the process itself, the reason says why; the
    // signal's usual hint (e.g. "killed from outside") would mislead.
    const status = options.signal ??
      (options.exitCode === null ? "exited" : `exit code ${options.exitCode}`);
    const why = options.limit
      ? `${LIMIT_TEXT[options.limit]} (limits.${options.limit}; ${status})`
      : options.reason
      ? `${options.reason} (${status})`
      : describeExit(options.exitCode, options.signal);
    super(
      withTail(
        `${what}: worker "${options.module}"${pid} ${why}`,
        options.stderrTail,
      ),
      options,
    );
    this.name = "WorkerCrashedError";
    this.module = options.module;
    this.pid = options.pid;
    this.exitCode = options.exitCode;
    this.signal = options.signal;
    this.hint = options.reason || options.limit
      ? undefined
      : signalHint(options.signal);
    this.stderrTail = options.stderrTail ?? "";
    this.op = options.op;
    this.reason = options.reason;
    this.attempts = attempts;
    this.pids = Object.freeze([...pids]);
    this.limit = options.limit;
  }
}

/** Options of {@linkcode WorkerTimeoutError}. */
export interface WorkerTimeoutErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command). */
  module: string;
  /** The op that timed out, or `undefined` for a start. */
  op?: string | undefined;
  /** The worker's pid, when known. */
  pid?: number | undefined;
  /** The deadline that passed, in milliseconds. */
  timeoutMs: number;
  /** How long the call or start had been running, in milliseconds. */
  elapsedMs: number;
  /** `"call"` for a call, `"start"` for a start (spawn, ready handshake and setup). */
  phase: "call" | "start";
}

/**
 * A call or a start passed its deadline. After a call timeout the worker is
 * kept if its event loop answers the liveness check; a wedged one (no answer
 * within 1 s), or one with two timeouts in a row, is replaced.
 *
 * @example Read the fields
 * ```ts
 * import { WorkerTimeoutError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new WorkerTimeoutError({
 *   module: "db.ts",
 *   op: "query",
 *   timeoutMs: 1000,
 *   elapsedMs: 1002,
 *   phase: "call",
 * });
 * assert.equal(error.op, "query");
 * assert.equal(error.phase, "call");
 * ```
 */
export class WorkerTimeoutError extends AirlockError {
  /** The worker module (or command). */
  readonly module: string;
  /** The op that timed out, or `undefined` for a start. */
  readonly op: string | undefined;
  /** The worker's pid, when known. */
  readonly pid: number | undefined;
  /** The deadline that passed, in milliseconds. */
  readonly timeoutMs: number;
  /** How long it had been running, in milliseconds. */
  readonly elapsedMs: number;
  /** Whether a call or a start timed out. */
  readonly phase: "call" | "start";

  /**
   * Creates a timeout error.
   *
   * @param options What timed out.
   */
  constructor(options: WorkerTimeoutErrorOptions) {
    const pid = options.pid === undefined ? "" : ` (pid ${options.pid})`;
    const what = options.phase === "start"
      ? `Cannot start worker "${options.module}"${pid}: not ready after ${
        Math.round(options.elapsedMs)
      } ms (startTimeoutMs ${options.timeoutMs})`
      : `Call "${options.op}" timed out: worker "${options.module}"${pid} did not answer within ${
        Math.round(options.elapsedMs)
      } ms (timeoutMs ${options.timeoutMs})`;
    super(what, options);
    this.name = "WorkerTimeoutError";
    this.module = options.module;
    this.op = options.op;
    this.pid = options.pid;
    this.timeoutMs = options.timeoutMs;
    this.elapsedMs = options.elapsedMs;
    this.phase = options.phase;
  }
}

/** Why a worker could not start. */
export type WorkerStartFailure =
  | "spawn"
  | "import"
  | "definition"
  | "exited"
  | "setup"
  | "handshake"
  | "retries";

/** Options of {@linkcode WorkerStartError}. */
export interface WorkerStartErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command). */
  module: string;
  /** Which step failed. */
  failure: WorkerStartFailure;
  /** Details for the message. */
  detail: string;
  /** The worker's pid, when it got one. */
  pid?: number | undefined;
  /** The exit code, if the process exited. */
  exitCode?: number | null;
  /** The signal that ended it, if any. */
  signal?: string | null;
  /** The tail of the worker's stderr. */
  stderrTail?: string;
  /** When the module threw during import: that error's message. */
  remoteMessage?: string | undefined;
  /** When the module threw during import: that error's stack. */
  remoteStack?: string | undefined;
}

/**
 * A worker could not be started: the spawn failed (binary missing), the
 * module failed to load, the definition was invalid, the process died before
 * it was ready, a `setup` call failed, or it kept failing after `maxRetries`.
 * `failure` says which.
 *
 * @example Tell an import failure from a crash
 * ```ts
 * import { WorkerStartError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new WorkerStartError({
 *   module: "db.ts",
 *   failure: "import",
 *   detail: "the module threw during import: Error: no native binding",
 * });
 * assert.equal(error.failure, "import");
 * ```
 */
export class WorkerStartError extends AirlockError {
  /** The worker module (or command). */
  readonly module: string;
  /** Which step failed. */
  readonly failure: WorkerStartFailure;
  /** The worker's pid, when it got one. */
  readonly pid: number | undefined;
  /** The exit code, when the process exited. */
  readonly exitCode: number | null;
  /** The signal name, when a signal ended it. */
  readonly signal: string | null;
  /** A likely cause for the signal. */
  readonly hint: string | undefined;
  /** The tail of the worker's stderr. */
  readonly stderrTail: string;
  /** When the module threw during import: that error's message. */
  readonly remoteMessage: string | undefined;
  /** When the module threw during import: that error's stack. */
  readonly remoteStack: string | undefined;

  /**
   * Creates a start error.
   *
   * @param options What failed.
   */
  constructor(options: WorkerStartErrorOptions) {
    const pid = options.pid === undefined ? "" : ` (pid ${options.pid})`;
    const signal = options.signal ?? null;
    const exit = options.exitCode !== undefined || signal
      ? `; it ${describeExit(options.exitCode ?? null, signal)}`
      : "";
    const stack = options.remoteStack ? `\n${options.remoteStack}` : "";
    super(
      withTail(
        `Cannot start worker "${options.module}"${pid}: ${options.detail}${exit}${stack}`,
        options.stderrTail,
      ),
      options,
    );
    this.name = "WorkerStartError";
    this.module = options.module;
    this.failure = options.failure;
    this.pid = options.pid;
    this.exitCode = options.exitCode ?? null;
    this.signal = signal;
    this.hint = signalHint(signal);
    this.stderrTail = options.stderrTail ?? "";
    this.remoteMessage = options.remoteMessage;
    this.remoteStack = options.remoteStack;
  }
}

/** Options of {@linkcode ProtocolError}. */
export interface ProtocolErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command) whose stream broke, when known. */
  module?: string | undefined;
}

/**
 * A malformed frame or message. The stream that carried it is not trusted
 * again: a session replaces the worker.
 *
 * @example
 * ```ts
 * import { ProtocolError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new ProtocolError("Cannot read frame: length 4294967295 exceeds maxFrameBytes 268435456");
 * assert.equal(error.name, "ProtocolError");
 * ```
 */
export class ProtocolError extends AirlockError {
  /** The worker module (or command) whose stream broke, when known. */
  readonly module: string | undefined;

  /**
   * Creates a protocol error.
   *
   * @param message What was wrong with the stream.
   * @param options The module, the cause.
   */
  constructor(message: string, options: ProtocolErrorOptions = {}) {
    super(
      options.module ? `${message} (worker "${options.module}")` : message,
      options,
    );
    this.name = "ProtocolError";
    this.module = options.module;
  }
}

/** Options of {@linkcode SessionClosedError}. */
export interface SessionClosedErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command). */
  module: string;
  /** The op that was refused, if any. */
  op?: string | undefined;
  /** What was closed: a `"session"`, a `"pool"` or a `"oneShot"` runner. */
  kind?: "session" | "pool" | "oneShot";
}

/**
 * A call on a closed (or closing) session or pool, or a call ended by
 * `close({ force: true })` or by `closeTimeoutMs`. `kind` says which kind of
 * handle was closed.
 *
 * @example
 * ```ts
 * import { SessionClosedError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new SessionClosedError({ module: "db.ts", op: "query", kind: "pool" });
 * assert.equal(error.op, "query");
 * assert.equal(error.kind, "pool");
 * ```
 */
export class SessionClosedError extends AirlockError {
  /** The worker module (or command). */
  readonly module: string;
  /** The op that was refused, if any. */
  readonly op: string | undefined;
  /** What was closed: `"session"`, `"pool"` or `"oneShot"`. */
  readonly kind: "session" | "pool" | "oneShot";

  /**
   * Creates a closed error.
   *
   * @param options What was refused.
   */
  constructor(options: SessionClosedErrorOptions) {
    const kind = options.kind ?? "session";
    super(
      options.op
        ? `Cannot call "${options.op}": the ${kind} of worker "${options.module}" is closed`
        : `Cannot use the ${kind} of worker "${options.module}": it is closed`,
      options,
    );
    this.name = "SessionClosedError";
    this.module = options.module;
    this.op = options.op;
    this.kind = kind;
  }
}

/** Options of {@linkcode PoolBusyError}. */
export interface PoolBusyErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command). */
  module: string;
  /** The op that was refused. */
  op: string;
  /** The queue limit that was reached. */
  maxQueue: number;
}

/**
 * A pool's queue is full (`maxQueue` calls waiting): the call is refused at
 * once instead of waiting.
 *
 * @example
 * ```ts
 * import { PoolBusyError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new PoolBusyError({ module: "db.ts", op: "query", maxQueue: 10 });
 * assert.equal(error.maxQueue, 10);
 * ```
 */
export class PoolBusyError extends AirlockError {
  /** The worker module (or command). */
  readonly module: string;
  /** The op that was refused. */
  readonly op: string;
  /** The queue limit that was reached. */
  readonly maxQueue: number;

  /**
   * Creates a busy error.
   *
   * @param options What was refused.
   */
  constructor(options: PoolBusyErrorOptions) {
    super(
      `Cannot queue call "${options.op}": the pool of worker "${options.module}" already has ${options.maxQueue} calls waiting (maxQueue)`,
      options,
    );
    this.name = "PoolBusyError";
    this.module = options.module;
    this.op = options.op;
    this.maxQueue = options.maxQueue;
  }
}

/** Options of {@linkcode PermissionError}. */
export interface PermissionErrorOptions extends AirlockErrorOptions {
  /** The worker module (or command). */
  module: string;
  /** Which permission or sandbox request could not be honoured. */
  permission: string;
}

/**
 * The permissions or sandbox asked for cannot be enforced here (e.g. a Bun
 * worker asks for a scope and no OS sandbox is available). Thrown before
 * anything is spawned; opt into `permissions.enforce: "best-effort"` to run
 * anyway.
 *
 * @example
 * ```ts
 * import { PermissionError } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const error = new PermissionError("bwrap is not installed", { module: "db.ts", permission: "sandbox" });
 * assert.equal(error.permission, "sandbox");
 * ```
 */
export class PermissionError extends AirlockError {
  /** The worker module (or command). */
  readonly module: string;
  /** Which permission or sandbox request could not be honoured. */
  readonly permission: string;

  /**
   * Creates a permission error.
   *
   * @param detail Why it cannot be enforced.
   * @param options The module and the permission.
   */
  constructor(detail: string, options: PermissionErrorOptions) {
    super(
      `Cannot enforce permissions of worker "${options.module}": ${detail}`,
      options,
    );
    this.name = "PermissionError";
    this.module = options.module;
    this.permission = options.permission;
  }
}
