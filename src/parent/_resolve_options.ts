/**
 * Resolution of the options of `oneShot`, `session` and `pool`: copies the
 * input, checks it with the validation kit (`src/_validate.ts`, which also
 * states the `TypeError` versus `RangeError` rule), fills defaults from
 * {@linkcode DEFAULTS} and returns a fully required form. Nothing is spawned
 * before validation passes. Private to src/parent.
 *
 * @module
 */

import {
  basename,
  existsSync,
  fileKind,
  fileURLToPath,
  isAbsolute,
  pathToFileURL,
  resolve as resolvePath,
} from "../runtime/node_builtins.ts";
import type { RuntimeAdapter, RuntimeName } from "../runtime/types.ts";
import { WorkerStartError } from "../errors.ts";
import type {
  ResolvedLauncher,
  WorkerTransport,
} from "../runtime/launch/transport.ts";
import { DEFAULT_WINDOW } from "./_stream.ts";
import { defaultLogSink } from "./_log_sink.ts";
import { envNameProblem, resolvePermissions } from "../runtime/permissions.ts";
import { isEmbeddedPath } from "../runtime/self_exec.ts";
import {
  checkKnownKeys,
  describe,
  invalid,
  milliseconds,
  oneOf,
  stringList,
  toPath,
  wholeNumber,
} from "../_validate.ts";
import {
  type CallKey,
  type CallOptions,
  CLOSE_OPTION_KEYS,
  type CloseOptions,
  DEFAULTS,
  LIMITS_OPTION_KEYS,
  type OneShotOptions,
  type PoolOptions,
  type ResolvedPoolOptions,
  type ResolvedWorkerOptions,
  RUNTIME_OPTIONS,
  SANDBOX_OPTIONS,
  type SessionOptions,
  type SetupCall,
  WORKER_OPTION_KEYS,
  type WorkerOptions,
} from "./options.ts";
import {
  LIMITS_ENFORCE,
  type LimitsOption,
  type ResolvedLimits,
} from "../runtime/sandbox/limits/types.ts";

/**
 * Turns the `module` argument into a URL: a `URL`, a URL string, or a path
 * (relative to the parent's working directory).
 *
 * @param module The argument.
 * @param cwd The parent's working directory.
 * @returns The module URL.
 * @throws {TypeError} when it is not a URL or path.
 * @throws {WorkerStartError} when the file does not exist.
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
    if (fileKind(path) !== "file") {
      // A start that cannot succeed, refused before any spawn (issue 27).
      throw new WorkerStartError({
        module: basename(path),
        failure: "import",
        detail:
          `the module file "${path}" does not exist or is not a file: check the path (a relative one is resolved against the parent's working directory, or pass new URL("./worker.ts", import.meta.url))`,
      });
    }
  }
  return url;
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
      throw new TypeError(invalid("env", "an object of strings", options.env));
    }
    for (const [name, value] of Object.entries(options.env)) {
      const problem = envNameProblem(name);
      if (problem !== undefined) {
        throw new RangeError(
          invalid(`env[${JSON.stringify(name)}]`, problem, name),
        );
      }
      if (typeof value !== "string") {
        throw new TypeError(invalid(`env.${name}`, "a string", value));
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
      invalid("setup", "a list of [op, ...args] calls", value),
    );
  }
  return value.map((call: unknown, index) => {
    if (!Array.isArray(call) || typeof call[0] !== "string") {
      throw new TypeError(
        invalid(`setup[${index}]`, "[op, ...args] with a string op", call),
      );
    }
    return [...call] as unknown as SetupCall;
  });
}

/** The smallest `limits.memoryBytes` accepted: 1 MiB (a unit mistake below). */
const MIN_MEMORY_BYTES = 2 ** 20;

/**
 * Validates the `limits` option and fills in its defaults.
 *
 * @param value The caller's `limits`.
 * @returns The resolved limits.
 * @throws {TypeError} when it is not an object, has an unknown key, or a
 *   value of the wrong type.
 * @throws {RangeError} when a value is out of range.
 */
export function resolveLimits(value: unknown): ResolvedLimits {
  if (value !== undefined) {
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      throw new TypeError(invalid("limits", "an object", value));
    }
    checkKnownKeys(value, LIMITS_OPTION_KEYS, "limits");
  }
  const limits = (value ?? {}) as LimitsOption;
  const optional = (key: keyof LimitsOption, min: number): number | undefined =>
    limits[key] === undefined
      ? undefined
      : wholeNumber(`limits.${key}`, limits[key], 0, min);
  return {
    memoryBytes: optional("memoryBytes", MIN_MEMORY_BYTES),
    processes: wholeNumber(
      "limits.processes",
      limits.processes,
      DEFAULTS.limits.processes,
      1,
    ),
    processesGiven: limits.processes !== undefined,
    cpuSeconds: optional("cpuSeconds", 1),
    fileSizeBytes: optional("fileSizeBytes", 0),
    openFiles: optional("openFiles", 1),
    enforce: oneOf(
      "limits.enforce",
      limits.enforce,
      LIMITS_ENFORCE,
      DEFAULTS.limits.enforce,
    ),
  };
}

function checkObject(
  what: string,
  options: unknown,
): asserts options is object {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(
      `Invalid ${what}: expected an object, received ${describe(options)}`,
    );
  }
}

/**
 * Validates the options every mode takes and fills in their defaults.
 *
 * @param module The worker module (ignored with `command`).
 * @param options The caller's options.
 * @param adapter The parent's runtime.
 * @param knownKeys The keys of the mode's options type.
 * @returns The resolved options.
 * @throws {TypeError} when an option has the wrong type or the module does not exist.
 * @throws {RangeError} when a value is out of range.
 */
export function resolveWorkerOptions(
  module: unknown,
  options: WorkerOptions,
  adapter: RuntimeAdapter,
  knownKeys: readonly string[] = WORKER_OPTION_KEYS,
): ResolvedWorkerOptions {
  checkObject("options", options);
  checkKnownKeys(options, knownKeys);
  const parentCwd = adapter.cwd();
  const cwd = options.cwd === undefined
    ? parentCwd
    : toPath("cwd", options.cwd, parentCwd);
  if (options.cwd !== undefined && fileKind(cwd) === "missing") {
    throw new TypeError(`Invalid option "cwd": "${cwd}" does not exist`);
  }
  const runtime = oneOf(
    "runtime",
    options.runtime,
    RUNTIME_OPTIONS,
    DEFAULTS.runtime,
  );
  const sandbox = oneOf(
    "sandbox",
    options.sandbox,
    SANDBOX_OPTIONS,
    DEFAULTS.sandbox,
  );
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
    throw new TypeError(invalid("onStderr", "a function", onStderr));
  }
  return {
    moduleUrl,
    label,
    runtime: runtime === "auto" ? adapter.name : runtime as RuntimeName,
    permissions: resolvePermissions(options.permissions, cwd),
    sandbox,
    limits: resolveLimits(options.limits),
    env: resolveEnv(options, adapter),
    cwd,
    config: options.config === undefined
      ? undefined
      : toPath("config", options.config, parentCwd),
    callTimeoutMs: milliseconds(
      "callTimeoutMs",
      options.callTimeoutMs,
      DEFAULTS.callTimeoutMs,
    ),
    startTimeoutMs: milliseconds(
      "startTimeoutMs",
      options.startTimeoutMs,
      DEFAULTS.startTimeoutMs,
    ),
    maxRetries: wholeNumber(
      "maxRetries",
      options.maxRetries,
      DEFAULTS.maxRetries,
      0,
    ),
    setup: resolveSetup(options.setup),
    idempotent: new Set(stringList("idempotent", options.idempotent)),
    cancelGraceMs: milliseconds(
      "cancelGraceMs",
      options.cancelGraceMs,
      DEFAULTS.cancelGraceMs,
    ),
    closeGraceMs: milliseconds(
      "closeGraceMs",
      options.closeGraceMs,
      DEFAULTS.closeGraceMs,
      false,
    ),
    // Sessions and pools only: other modes refuse the key above.
    closeTimeoutMs: milliseconds(
      "closeTimeoutMs",
      (options as SessionOptions).closeTimeoutMs,
      DEFAULTS.closeTimeoutMs,
    ),
    onLog: onStderr ?? defaultLogSink((text) => adapter.writeStderr(text)),
    maxFrameBytes: wholeNumber(
      "maxFrameBytes",
      options.maxFrameBytes,
      DEFAULTS.maxFrameBytes,
      1024,
    ),
    command,
    launcher: resolveLauncher("launcher", options.launcher),
  };
}

/**
 * Validates the options only pools take and fills in their defaults.
 *
 * @typeParam D The worker definition type (unused here).
 * @param options The caller's options (already checked for unknown keys).
 * @returns The resolved pool options.
 * @throws {TypeError} when an option has the wrong type.
 * @throws {RangeError} when a value is out of range (`min` or `prewarm` above `max`).
 */
export function resolvePoolOptions<D>(
  options: PoolOptions<D>,
): ResolvedPoolOptions {
  const max = wholeNumber("max", options.max, DEFAULTS.max, 1);
  const min = wholeNumber("min", options.min, DEFAULTS.min, 0);
  if (min > max) {
    throw new RangeError(invalid("min", `at most max (${max})`, min));
  }
  let prewarm = 0;
  if (options.prewarm === true) prewarm = Math.max(min, 1);
  else if (options.prewarm !== undefined && options.prewarm !== false) {
    prewarm = wholeNumber("prewarm", options.prewarm, 0, 0);
    if (prewarm > max) {
      throw new RangeError(invalid("prewarm", `at most max (${max})`, prewarm));
    }
  }
  return {
    max,
    min,
    prewarm,
    idleTimeoutMs: milliseconds(
      "idleTimeoutMs",
      options.idleTimeoutMs,
      DEFAULTS.idleTimeoutMs,
    ),
    maxTasksPerWorker: wholeNumber(
      "maxTasksPerWorker",
      options.maxTasksPerWorker,
      DEFAULTS.maxTasksPerWorker,
      0,
    ),
    maxRssBytes: wholeNumber(
      "maxRssBytes",
      options.maxRssBytes,
      DEFAULTS.maxRssBytes,
      0,
    ),
    maxQueue: wholeNumber(
      "maxQueue",
      options.maxQueue,
      DEFAULTS.maxQueue,
      0,
    ),
    concurrency: wholeNumber(
      "concurrency",
      options.concurrency,
      DEFAULTS.concurrency,
      1,
    ),
    pipeline: wholeNumber(
      "pipeline",
      options.pipeline,
      DEFAULTS.pipeline,
      0,
    ),
    route: resolveRoute(options.route),
    launchers: resolveLaunchers(options),
  };
}

/**
 * Checks a launcher: an argv prefix (a list of strings; empty: none) or a
 * transport (`{ name, start }`).
 *
 * @param name The option's name, for errors.
 * @param value Its value.
 * @returns The launcher, or `undefined` for none.
 * @throws {TypeError} when it is neither.
 */
function resolveLauncher(
  name: string,
  value: unknown,
): ResolvedLauncher | undefined {
  if (value === undefined || Array.isArray(value)) {
    const [program, ...rest] = stringList(name, value);
    return program === undefined ? undefined : [program, ...rest];
  }
  const transport = value as Partial<WorkerTransport> | null;
  if (
    typeof transport !== "object" || transport === null ||
    typeof transport.start !== "function" ||
    typeof transport.name !== "string"
  ) {
    throw new TypeError(
      invalid(
        name,
        "an argv prefix (a list of strings) or a transport ({ name, start })",
        value,
      ),
    );
  }
  return transport as WorkerTransport;
}

function resolveLaunchers<D>(options: PoolOptions<D>): ResolvedLauncher[] {
  const value: unknown = options.launchers;
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new TypeError(
      invalid(
        "launchers",
        "a list of launchers (argv lists or transports)",
        value,
      ),
    );
  }
  if (value.length === 0) {
    throw new RangeError(invalid("launchers", "at least one launcher", value));
  }
  if (options.launcher !== undefined) {
    throw new TypeError(
      'Invalid options "launcher" and "launchers": give one of them (a pool over several hosts takes "launchers" alone)',
    );
  }
  return value.map((launcher: unknown, index) => {
    const resolved = resolveLauncher(`launchers[${index}]`, launcher);
    if (resolved === undefined) {
      throw new RangeError(
        invalid(`launchers[${index}]`, "a non-empty argv prefix", launcher),
      );
    }
    return resolved;
  });
}

function resolveRoute(value: unknown): ResolvedPoolOptions["route"] {
  if (value === undefined) return undefined;
  if (typeof value !== "function") {
    throw new TypeError(invalid("route", "a function", value));
  }
  return value as ResolvedPoolOptions["route"];
}

/**
 * Checks a sticky routing key (a call's `key`, or what `route` returned).
 *
 * @param value The key.
 * @param name What it is, for the error.
 * @returns The key, or `undefined` for none.
 * @throws {TypeError} when it is neither a string nor a finite number.
 */
export function checkKey(value: unknown, name: string): CallKey | undefined {
  if (value === undefined) return undefined;
  if (typeof value === "string") return value;
  if (typeof value === "number" && Number.isFinite(value)) return value;
  throw new TypeError(invalid(name, "a string or a finite number", value));
}

/**
 * Validates the options only one-shot runners take.
 *
 * @param options The caller's options (already checked for unknown keys).
 * @returns The number of spares.
 * @throws {TypeError} when `spares` is not a number.
 * @throws {RangeError} when `spares` is not a whole number >= 0.
 */
export function resolveSpares(options: Pick<OneShotOptions, "spares">): number {
  return wholeNumber("spares", options.spares, DEFAULTS.spares, 0);
}

/**
 * Resolves the options of one call against the mode's defaults.
 *
 * @param options The call's options.
 * @param callTimeoutMs The mode's default deadline.
 * @returns The deadline and signal.
 * @throws {TypeError} when an option has the wrong type or is unknown.
 * @throws {RangeError} when the deadline is out of range.
 */
export function resolveCallOptions(
  options: CallOptions | undefined,
  callTimeoutMs: number,
): ResolvedCallOptions {
  if (options === undefined) {
    return {
      key: undefined,
      timeoutMs: callTimeoutMs,
      signal: undefined,
      totalTimeoutMs: 0,
      onProgress: undefined,
      windowItems: DEFAULT_WINDOW.items,
      windowBytes: DEFAULT_WINDOW.bytes,
      settleStopped: false,
    };
  }
  checkObject("call options", options);
  const settle = options.settle;
  if (settle !== undefined && settle !== "now" && settle !== "stopped") {
    throw new TypeError(invalid("settle", '"now" or "stopped"', settle));
  }
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(invalid("signal", "an AbortSignal", signal));
  }
  const onProgress = options.onProgress;
  if (onProgress !== undefined && typeof onProgress !== "function") {
    throw new TypeError(invalid("onProgress", "a function", onProgress));
  }
  return {
    key: checkKey(options.key, "key"),
    timeoutMs: milliseconds("timeoutMs", options.timeoutMs, callTimeoutMs),
    signal,
    totalTimeoutMs: milliseconds("totalTimeoutMs", options.totalTimeoutMs, 0),
    onProgress,
    windowItems: wholeNumber(
      "windowItems",
      options.windowItems,
      DEFAULT_WINDOW.items,
      1,
    ),
    windowBytes: wholeNumber(
      "windowBytes",
      options.windowBytes,
      DEFAULT_WINDOW.bytes,
      1,
    ),
    settleStopped: settle === "stopped",
  };
}

/** {@linkcode CallOptions} after validation, with every default filled in. */
export interface ResolvedCallOptions {
  /** The sticky routing key (pools), if any. */
  key: CallKey | undefined;
  /** Deadline once written (a stream: between values), in ms; 0 for none. */
  timeoutMs: number;
  /** The caller's signal. */
  signal: AbortSignal | undefined;
  /** Deadline of the whole call in ms; 0 for none. */
  totalTimeoutMs: number;
  /** Receives progress reports. */
  onProgress: ((value: unknown) => void) | undefined;
  /** A stream's window of values. */
  windowItems: number;
  /** A stream's window of bytes. */
  windowBytes: number;
  /** Whether a timed-out or aborted call rejects only once its handler stopped. */
  settleStopped: boolean;
}

/**
 * Resolves the options of `close()` against the mode's `closeTimeoutMs`.
 *
 * @param options The close options.
 * @param closeTimeoutMs The mode's bound of a plain close (0: none).
 * @returns Whether to force, and the bound in ms (0: none).
 * @throws {TypeError} when an option has the wrong type or is unknown.
 * @throws {RangeError} when the bound is out of range.
 */
export function resolveCloseOptions(
  options: CloseOptions | undefined,
  closeTimeoutMs: number,
): { force: boolean; timeoutMs: number } {
  if (options === undefined) return { force: false, timeoutMs: closeTimeoutMs };
  checkObject("close options", options);
  checkKnownKeys(options, CLOSE_OPTION_KEYS, "close()");
  const force = options.force ?? false;
  if (typeof force !== "boolean") {
    throw new TypeError(invalid("force", "a boolean", force));
  }
  return {
    force,
    timeoutMs: milliseconds("timeoutMs", options.timeoutMs, closeTimeoutMs),
  };
}
