/**
 * Options shared by `oneShot`, `session` and `pool`: their documentation,
 * defaults, validation and resolution into a fully required form. Nothing
 * is spawned before validation passes.
 *
 * @module
 */

import { basename, isAbsolute, resolve as resolvePath } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { existsSync, statSync } from "node:fs";
import type { RuntimeAdapter, RuntimeName } from "../runtime/types.ts";
import type { LogSink, LogSource } from "./connection.ts";
import {
  type PermissionsOption,
  type ResolvedPermissions,
  resolvePermissions,
} from "../runtime/permissions.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../protocol/frame.ts";
import { isEmbeddedPath } from "../runtime/self_exec.ts";
import { SANDBOX_MODES, type SandboxMode } from "../runtime/launch/types.ts";

/** Default deadline of a call once written to the worker: 5 minutes. */
export const DEFAULT_CALL_TIMEOUT_MS = 300_000;
/** Default deadline for a worker to be ready (spawn, load, hello, setup): 60 s. */
export const DEFAULT_START_TIMEOUT_MS = 60_000;
/** Default number of respawns after a failed start, and of retries of an idempotent call. */
export const DEFAULT_MAX_RETRIES = 2;
/** Default time a cancelled call may keep running before its worker is killed. */
export const DEFAULT_CANCEL_GRACE_MS = 5_000;
/** Default time each step of a shutdown (ask, SIGTERM) may take before the next. */
export const DEFAULT_CLOSE_GRACE_MS = 5_000;

/** Where the worker runs and with which runtime. */
export type RuntimeOption = "deno" | "bun" | "auto";

/** Which OS-level sandbox wraps the worker (one definition: `SandboxMode`). */
export type SandboxOption = SandboxMode;

/** One setup call: the op, then its arguments. */
export type SetupCall = readonly [op: string, ...args: unknown[]];

/** Options every mode takes. */
export interface WorkerOptions {
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
   * The OS sandbox (bubblewrap on Linux) that confines native code too:
   * `"os"` requires it, `"none"` never uses it, `"auto"` uses it when
   * available and the worker is Bun or is granted `ffi`.
   *
   * @default {"auto"}
   */
  sandbox?: SandboxOption;
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
   * `WorkerTimeoutError`; two in a row replace the worker. `0` disables it.
   * Overridable per call.
   *
   * @default {300000}
   */
  callTimeoutMs?: number;
  /**
   * Deadline for a worker to be ready (spawn, import, hello and `setup`), in
   * milliseconds. Past it the start fails with `WorkerTimeoutError`.
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
   * Calls run on every new worker before any other call, e.g.
   * `[["open", "./data"]]`. A failing setup call fails the start.
   *
   * @default {[]}
   */
  setup?: readonly SetupCall[];
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
   * stdout. By default lines go to the parent's stderr, prefixed with the
   * module name and pid.
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
   * worker. `runtime`, `permissions` and `sandbox` do not apply to it.
   *
   * @default {undefined}
   */
  command?: readonly string[];
  /**
   * A prefix for the worker command, to run it elsewhere:
   * `["ssh", "host", "--"]`, `["docker", "exec", "-i", "ctr"]`. Permissions
   * and the sandbox are then the remote side's job.
   *
   * @default {[]}
   */
  launcher?: readonly string[];
}

/** Options of one call. */
export interface CallOptions {
  /** Aborting it rejects the call with `signal.reason` and cancels it in the worker. */
  signal?: AbortSignal;
  /** This call's deadline in milliseconds; `0` disables it. */
  timeoutMs?: number;
}

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
  /** Log sink. */
  onLog: LogSink;
  /** Frame cap. */
  maxFrameBytes: number;
  /** Custom command, if any. */
  command: string[] | undefined;
  /** Launcher prefix. */
  launcher: string[];
}

function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "bigint") return `${value}n`;
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "object") return "an object";
  return String(value);
}

/**
 * Checks a millisecond option: a finite number ≥ 0 (or > 0).
 *
 * @param name The option's name.
 * @param value Its value.
 * @param fallback The default.
 * @param allowZero Whether 0 is accepted.
 * @returns The value.
 */
export function milliseconds(
  name: string,
  value: unknown,
  fallback: number,
  allowZero = true,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number") {
    throw new TypeError(
      `Invalid option "${name}": expected a number of milliseconds, received ${
        describe(value)
      }`,
    );
  }
  if (!Number.isFinite(value) || value < 0 || (!allowZero && value === 0)) {
    throw new RangeError(
      `Invalid option "${name}": expected a finite number ${
        allowZero ? "≥ 0" : "> 0"
      }, received ${describe(value)}`,
    );
  }
  return value;
}

/**
 * Checks a whole-number option.
 *
 * @param name The option's name.
 * @param value Its value.
 * @param fallback The default.
 * @param min The smallest accepted value.
 * @returns The value.
 */
export function wholeNumber(
  name: string,
  value: unknown,
  fallback: number,
  min: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number") {
    throw new TypeError(
      `Invalid option "${name}": expected a whole number, received ${
        describe(value)
      }`,
    );
  }
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(
      `Invalid option "${name}": expected a whole number ≥ ${min}, received ${
        describe(value)
      }`,
    );
  }
  return value;
}

function stringList(name: string, value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new TypeError(
      `Invalid option "${name}": expected a list of strings, received ${
        describe(value)
      }`,
    );
  }
  value.forEach((item, index) => {
    if (typeof item !== "string") {
      throw new TypeError(
        `Invalid option "${name}[${index}]": expected a string, received ${
          describe(item)
        }`,
      );
    }
  });
  return [...value];
}

function toPath(name: string, value: unknown, cwd: string): string {
  if (value instanceof URL) {
    if (value.protocol !== "file:") {
      throw new TypeError(
        `Invalid option "${name}": expected a file URL or path, received ${value.href}`,
      );
    }
    return fileURLToPath(value);
  }
  if (typeof value !== "string" || value === "") {
    throw new TypeError(
      `Invalid option "${name}": expected a path or file URL, received ${
        describe(value)
      }`,
    );
  }
  if (value.startsWith("file:")) return fileURLToPath(value);
  return isAbsolute(value) ? value : resolvePath(cwd, value);
}

/**
 * Turns the `module` argument into a URL: a `URL`, a URL string, or a path
 * (relative to the parent's working directory).
 *
 * @param module The argument.
 * @param cwd The parent's working directory.
 * @returns The module URL.
 * @throws {TypeError} when it is not a URL or path, or the file does not exist.
 */
export function resolveModule(module: unknown, cwd: string): URL {
  let url: URL;
  if (module instanceof URL) {
    url = module;
  } else if (typeof module === "string" && module !== "") {
    if (/^[a-z][a-z0-9+.-]*:/i.test(module) && !/^[a-z]:[\\/]/i.test(module)) {
      url = new URL(module);
    } else {
      url = pathToFileURL(
        isAbsolute(module) ? module : resolvePath(cwd, module),
      );
    }
  } else {
    throw new TypeError(
      `Invalid worker module: expected a URL or a path, received ${
        describe(module)
      }`,
    );
  }
  if (url.protocol === "file:") {
    const path = fileURLToPath(url);
    if (isEmbeddedPath(path)) {
      // Inside a `bun build --compile` executable, a bundled `x.ts` is `x.js`.
      const twin = path.replace(/\.[cm]?tsx?$/, ".js");
      if (!existsSync(path) && !existsSync(twin)) {
        throw new TypeError(
          `Invalid worker module: "${path}" is not embedded in this executable; pass it to bun build --compile as an additional entrypoint`,
        );
      }
      return url;
    }
    if (!existsSync(path) || !statSync(path).isFile()) {
      throw new TypeError(
        `Invalid worker module: "${path}" does not exist or is not a file`,
      );
    }
  }
  return url;
}

function defaultLogSink(adapter: RuntimeAdapter): LogSink {
  return (line, source) => {
    adapter.writeStderr(`[${source.module} ${source.pid}] ${line}\n`);
  };
}

function resolveEnv(
  options: WorkerOptions,
  adapter: RuntimeAdapter,
): Record<string, string> {
  const env: Record<string, string> = {};
  const inherit = options.inheritEnv;
  if (inherit === true) {
    Object.assign(env, adapter.environment());
  } else if (inherit !== undefined && inherit !== false) {
    for (const name of stringList("inheritEnv", inherit)) {
      const value = adapter.env(name);
      if (value !== undefined) env[name] = value;
    }
  }
  if (options.env !== undefined) {
    if (typeof options.env !== "object" || options.env === null) {
      throw new TypeError(
        `Invalid option "env": expected an object of strings, received ${
          describe(options.env)
        }`,
      );
    }
    for (const [name, value] of Object.entries(options.env)) {
      if (typeof value !== "string") {
        throw new TypeError(
          `Invalid option "env.${name}": expected a string, received ${
            describe(value)
          }`,
        );
      }
      env[name] = value;
    }
  }
  return env;
}

function resolveSetup(value: unknown): SetupCall[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new TypeError(
      `Invalid option "setup": expected a list of [op, ...args] calls, received ${
        describe(value)
      }`,
    );
  }
  return value.map((call, index) => {
    if (!Array.isArray(call) || typeof call[0] !== "string") {
      throw new TypeError(
        `Invalid option "setup[${index}]": expected [op, ...args] with a string op, received ${
          describe(call)
        }`,
      );
    }
    return [...call] as unknown as SetupCall;
  });
}

/** The keys of {@linkcode WorkerOptions}. */
const COMMON_KEYS: readonly string[] = [
  "runtime",
  "permissions",
  "sandbox",
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
];

/**
 * Refuses option keys the mode does not know: a typo such as
 * `callTimeOutMs`, or a pool option given to a session, would otherwise be
 * ignored without a word.
 */
function checkKnownKeys(options: object, modeKeys: readonly string[]): void {
  for (const key of Object.keys(options)) {
    if (COMMON_KEYS.includes(key) || modeKeys.includes(key)) continue;
    const known = [...COMMON_KEYS, ...modeKeys];
    const near = known.find((name) => name.toLowerCase() === key.toLowerCase());
    throw new TypeError(
      `Invalid option "${key}": this mode has no such option${
        near ? ` (did you mean "${near}"?)` : ""
      }; known options: ${known.join(", ")}`,
    );
  }
}

const RUNTIMES: readonly string[] = ["deno", "bun", "auto"];

/**
 * Validates the options every mode takes and fills in their defaults.
 *
 * @param module The worker module (ignored with `command`).
 * @param options The caller's options.
 * @param adapter The parent's runtime.
 * @returns The resolved options.
 * @throws {TypeError} when an option has the wrong type or the module does not exist.
 * @throws {RangeError} when a number is out of range.
 */
export function resolveWorkerOptions(
  module: unknown,
  options: WorkerOptions,
  adapter: RuntimeAdapter,
  modeKeys: readonly string[] = [],
): ResolvedWorkerOptions {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(
      `Invalid options: expected an object, received ${describe(options)}`,
    );
  }
  checkKnownKeys(options, modeKeys);
  const parentCwd = adapter.cwd();
  const cwd = options.cwd === undefined
    ? parentCwd
    : toPath("cwd", options.cwd, parentCwd);
  if (options.cwd !== undefined && !existsSync(cwd)) {
    throw new TypeError(`Invalid option "cwd": "${cwd}" does not exist`);
  }
  const runtimeOption = options.runtime ?? "auto";
  if (!RUNTIMES.includes(runtimeOption)) {
    throw new TypeError(
      `Invalid option "runtime": expected "deno", "bun" or "auto", received ${
        describe(runtimeOption)
      }`,
    );
  }
  const sandbox = options.sandbox ?? "auto";
  if (!(SANDBOX_MODES as readonly unknown[]).includes(sandbox)) {
    throw new TypeError(
      `Invalid option "sandbox": expected "none", "os" or "auto", received ${
        describe(sandbox)
      }`,
    );
  }
  const command = options.command === undefined
    ? undefined
    : stringList("command", options.command);
  if (command !== undefined && command.length === 0) {
    throw new RangeError(
      `Invalid option "command": expected at least the program, received an empty list`,
    );
  }
  const moduleUrl = command ? undefined : resolveModule(module, parentCwd);
  // With `command`, the module argument (if any) only names the worker.
  const label = command
    ? basename(
      typeof module === "string" && module !== ""
        ? module
        : module instanceof URL
        ? module.pathname
        : command[command.length - 1] ?? "worker",
    )
    : basename(moduleUrl?.pathname ?? "worker");
  const onStderr = options.onStderr;
  if (onStderr !== undefined && typeof onStderr !== "function") {
    throw new TypeError(
      `Invalid option "onStderr": expected a function, received ${
        describe(onStderr)
      }`,
    );
  }
  return {
    moduleUrl,
    label,
    runtime: runtimeOption === "auto"
      ? adapter.name
      : runtimeOption as RuntimeName,
    permissions: resolvePermissions(options.permissions, cwd),
    sandbox: sandbox as SandboxOption,
    env: resolveEnv(options, adapter),
    cwd,
    config: options.config === undefined
      ? undefined
      : toPath("config", options.config, parentCwd),
    callTimeoutMs: milliseconds(
      "callTimeoutMs",
      options.callTimeoutMs,
      DEFAULT_CALL_TIMEOUT_MS,
    ),
    startTimeoutMs: milliseconds(
      "startTimeoutMs",
      options.startTimeoutMs,
      DEFAULT_START_TIMEOUT_MS,
    ),
    maxRetries: wholeNumber(
      "maxRetries",
      options.maxRetries,
      DEFAULT_MAX_RETRIES,
      0,
    ),
    setup: resolveSetup(options.setup),
    idempotent: new Set(stringList("idempotent", options.idempotent)),
    cancelGraceMs: milliseconds(
      "cancelGraceMs",
      options.cancelGraceMs,
      DEFAULT_CANCEL_GRACE_MS,
    ),
    closeGraceMs: milliseconds(
      "closeGraceMs",
      options.closeGraceMs,
      DEFAULT_CLOSE_GRACE_MS,
      false,
    ),
    onLog: onStderr ?? defaultLogSink(adapter),
    maxFrameBytes: wholeNumber(
      "maxFrameBytes",
      options.maxFrameBytes,
      DEFAULT_MAX_FRAME_BYTES,
      1024,
    ),
    command,
    launcher: stringList("launcher", options.launcher),
  };
}

/**
 * Resolves the options of one call against the mode's defaults.
 *
 * @param options The call's options.
 * @param callTimeoutMs The mode's default deadline.
 * @returns The deadline and signal.
 */
export function resolveCallOptions(
  options: CallOptions | undefined,
  callTimeoutMs: number,
): { timeoutMs: number; signal: AbortSignal | undefined } {
  if (options === undefined) {
    return { timeoutMs: callTimeoutMs, signal: undefined };
  }
  if (typeof options !== "object" || options === null) {
    throw new TypeError(
      `Invalid call options: expected an object, received ${describe(options)}`,
    );
  }
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(
      `Invalid call option "signal": expected an AbortSignal, received ${
        describe(signal)
      }`,
    );
  }
  return {
    timeoutMs: milliseconds("timeoutMs", options.timeoutMs, callTimeoutMs),
    signal,
  };
}
