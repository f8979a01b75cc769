/**
 * The OS sandbox: on Linux, bubblewrap (`bwrap`) runs the worker in its own
 * mount, network, IPC, UTS and user namespaces, so that everything in the
 * process, native code included, sees only the runtime, its libraries, the
 * worker's code and the granted paths. Pure functions that decide whether to
 * use it and build its command line, plus a PATH lookup for `bwrap`.
 *
 * See docs/permissions.md for what each layer enforces on each runtime.
 *
 * @module
 */

import {
  accessSync,
  constants as fsConstants,
  existsSync,
  readdirSync,
  realpathSync,
  statSync,
} from "node:fs";
import {
  basename,
  delimiter,
  dirname,
  isAbsolute,
  join,
  posix,
} from "node:path";
import process from "node:process";
import type { ResolvedPermissions, ResolvedScopes } from "./permissions.ts";
import { isGranted } from "./permissions.ts";
import { signalName } from "./_signals.ts";

/**
 * The `sandbox` option: `"os"` requires the OS sandbox (fails where it
 * cannot be had), `"none"` never uses it, `"auto"` uses it when bubblewrap is
 * present and either the runtime is Bun (no permission model of its own) or
 * the worker is granted `ffi` or `run` (native code and subprocesses escape
 * Deno's flags).
 */
export type SandboxMode = "none" | "os" | "auto";

/** The default of the `sandbox` option. */
export const DEFAULT_SANDBOX_MODE: SandboxMode = "auto";

/**
 * Directories of shared libraries, mounted read-only when they exist: the
 * runtime's own dependencies (libc, libm, libgcc_s…) and whatever a native
 * client loads by name.
 */
export const LIBRARY_PATHS: readonly string[] = [
  "/lib",
  "/lib32",
  "/lib64",
  "/libx32",
  "/usr/lib",
  "/usr/lib32",
  "/usr/lib64",
  "/usr/libx32",
  "/usr/local/lib",
  "/nix/store",
  "/etc/ld.so.cache",
  "/etc/localtime",
];

/**
 * Files a worker needs to resolve names and verify TLS certificates,
 * mounted read-only when `net` is granted and they exist.
 */
export const NETWORK_PATHS: readonly string[] = [
  "/etc/resolv.conf",
  "/etc/hosts",
  "/etc/nsswitch.conf",
  "/etc/host.conf",
  "/etc/gai.conf",
  "/etc/services",
  "/etc/protocols",
  "/etc/ssl",
  "/etc/pki",
  "/etc/ca-certificates",
  "/usr/share/ca-certificates",
  "/usr/local/share/ca-certificates",
];

/**
 * Directories of programs, mounted read-only when `run` is granted and they
 * exist, so that granted programs can be found and started.
 */
export const PROGRAM_PATHS: readonly string[] = [
  "/usr",
  "/bin",
  "/sbin",
];

/** Options of {@linkcode bwrapArgv}. */
export interface BwrapOptions {
  /** The bubblewrap binary (from {@linkcode findBwrap}). */
  bwrap: string;
  /** The runtime binary, mounted read-only at its own path. Pass its real path (symlinks resolved). */
  runtimeBinary: string;
  /** The whole command to run inside, e.g. `[deno, "run", ...flags, main]`. */
  command: readonly string[];
  /**
   * Paths the worker needs read-only besides its grants: its module tree,
   * `node_modules`, airlock's own directory, its config files, Deno's module
   * caches (see {@linkcode denoCacheMounts}). Absolute.
   */
  readOnly: readonly string[];
  /** Granted read paths (absolute), or `true` for the whole file system. */
  read: ResolvedScopes;
  /** Granted write paths (absolute), or `true` for the whole file system. Must exist to be visible. */
  write: ResolvedScopes;
  /** Whether any network access is granted: the network namespace is then shared. */
  net: boolean;
  /**
   * Granted programs: `true` or names mount the system's program directories
   * ({@linkcode PROGRAM_PATHS}); absolute paths are mounted too.
   *
   * @default {[]}
   */
  run?: ResolvedScopes;
  /**
   * Granted native libraries (absolute paths), mounted read-only. `true`
   * mounts nothing more: the library directories are always there.
   *
   * @default {[]}
   */
  ffi?: ResolvedScopes;
  /** The worker's whole environment: the sandbox starts from an empty one. */
  env: Readonly<Record<string, string>>;
  /**
   * The worker's working directory (absolute). When no mount covers it, an
   * empty directory is made at its path so that relative paths to mounted
   * paths keep working.
   */
  cwd: string;
}

/** A sandboxed command, ready to spawn. */
export interface SandboxPlan {
  /** The whole argv, starting with the bubblewrap binary. */
  argv: string[];
  /** The environment of the bubblewrap process itself: empty, bwrap passes the worker's own with `--setenv`. */
  env: Record<string, string>;
  /**
   * The spawned pid is bubblewrap's, not the worker's: take the worker's pid
   * from its hello message. Always `true`, as a reminder.
   */
  pidFromHello: true;
  /** Maps bubblewrap's exit status back to the worker's. */
  mapExit(
    code: number | null,
    signal: string | null,
  ): { code: number | null; signal: string | null };
}

let located: string | null | undefined;

/**
 * The bubblewrap binary on Linux, looked up on `path` once per process.
 *
 * @param path The PATH to search (default `/usr/bin:/bin`).
 * @returns Its path, or `undefined` (always on other systems).
 */
export function locateBwrap(path: string | undefined): string | undefined {
  if (located === undefined) {
    located = process.platform === "linux"
      ? findBwrap({ PATH: path ?? "/usr/bin:/bin" }) ?? null
      : null;
  }
  return located ?? undefined;
}

/** Options of {@linkcode sandboxedArgv}. */
export interface SandboxedArgvOptions {
  /** The bubblewrap binary. */
  bwrap: string;
  /** The runtime binary (symlinks are resolved here). */
  runtimeBinary: string;
  /** The command to run inside. */
  command: readonly string[];
  /** Read-only mounts for the worker's code. */
  readOnly: readonly string[];
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** The worker's whole environment. */
  env: Readonly<Record<string, string>>;
  /** The worker's working directory. */
  cwd: string;
}

/**
 * The bubblewrap argv for a worker command with the given permissions: the
 * one place that maps permissions onto {@linkcode bwrapArgv}.
 *
 * @param options The command, mounts, permissions, environment and cwd.
 * @returns The whole argv, starting with the bubblewrap binary.
 */
export function sandboxedArgv(options: SandboxedArgvOptions): string[] {
  const permissions = options.permissions;
  return bwrapArgv({
    bwrap: options.bwrap,
    runtimeBinary: realpathSync(options.runtimeBinary),
    command: options.command,
    readOnly: options.readOnly,
    read: permissions.read,
    write: permissions.write,
    net: isGranted(permissions.net),
    run: permissions.run,
    ffi: permissions.ffi,
    env: options.env,
    cwd: options.cwd,
  });
}

/**
 * Finds the bubblewrap binary on PATH.
 *
 * @param env The environment whose PATH to search (default: this process's).
 * @returns The path of an executable `bwrap`, or `undefined`.
 *
 * @example
 * ```ts
 * import { findBwrap } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(findBwrap({ PATH: "/nonexistent" }), undefined);
 * ```
 */
export function findBwrap(
  env: Readonly<Record<string, string | undefined>> = process.env,
): string | undefined {
  for (const dir of (env.PATH ?? "").split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue;
    const candidate = join(dir, "bwrap");
    try {
      accessSync(candidate, fsConstants.X_OK);
      if (statSync(candidate).isFile()) return candidate;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/**
 * Builds bubblewrap's command line for a worker. The worker gets new user
 * (with nested user namespaces disabled), IPC, UTS and cgroup namespaces and,
 * unless `net` is granted, a network namespace with only loopback; it keeps
 * the host's pid namespace (so its own pid is a real one). No capabilities;
 * a new session; killed when its parent dies; an environment of `env` only
 * (bubblewrap adds `PWD`).
 *
 * The file system is a read-only empty root with: the library directories
 * ({@linkcode LIBRARY_PATHS}), the runtime binary, `readOnly` and the read
 * grants read-only; the write grants read-write; a private `/tmp`, a minimal
 * `/dev` and `/proc`; the network files ({@linkcode NETWORK_PATHS}) when
 * `net` is granted; the program directories ({@linkcode PROGRAM_PATHS}) when
 * `run` is. Paths that do not exist are skipped. A write grant wins over a
 * read-only mount of the same or an inner path; an inner write grant inside
 * a read-only path stays writable. A grant that covers `/tmp` replaces the
 * private `/tmp`.
 *
 * @param options What to run and what to show it.
 * @returns The argv, starting with `options.bwrap`.
 * @throws {RangeError} when a path is relative or an environment variable
 * name is empty or contains `=`.
 *
 * @example A Deno worker with one read-write directory
 * ```ts
 * import { bwrapArgv } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * const argv = bwrapArgv({
 *   bwrap: "/usr/bin/bwrap",
 *   runtimeBinary: "/opt/deno/deno",
 *   command: ["/opt/deno/deno", "run", "--no-prompt", "/app/main.ts"],
 *   readOnly: ["/app"],
 *   read: [],
 *   write: ["/app/data"],
 *   net: false,
 *   env: { NO_COLOR: "1" },
 *   cwd: "/app",
 * });
 * assert.equal(argv[0], "/usr/bin/bwrap");
 * assert.ok(argv.includes("--unshare-net"));
 * assert.deepEqual(argv.slice(-5), ["--", ...[
 *   "/opt/deno/deno", "run", "--no-prompt", "/app/main.ts",
 * ]]);
 * ```
 */
export function bwrapArgv(options: BwrapOptions): string[] {
  const read = scopesToPaths(options.read, "read");
  const write = scopesToPaths(options.write, "write");
  const run = options.run ?? [];
  const ffi = options.ffi ?? [];
  const cwd = normalizePath(options.cwd, "cwd");

  const readOnly: string[] = [
    ...LIBRARY_PATHS,
    ...(options.net ? NETWORK_PATHS : []),
    ...(isGranted(run) ? PROGRAM_PATHS : []),
    normalizePath(options.runtimeBinary, "runtimeBinary"),
    ...options.readOnly.map((path, index) =>
      normalizePath(path, `readOnly[${index}]`)
    ),
    ...read,
    ...(run === true
      ? []
      : run.filter((entry) => isAbsolute(entry)).map((path, index) =>
        normalizePath(path, `run[${index}]`)
      )),
    ...(ffi === true
      ? []
      : ffi.map((path, index) => normalizePath(path, `ffi[${index}]`))),
  ];

  const writable = minimal(write);
  const readable = minimal(
    readOnly.filter((path) => !writable.some((rw) => covers(rw, path))),
  );
  const bound = [...writable, ...readable];

  const mounts: Mount[] = [
    ...readable.map((path): Mount => ({
      path,
      args: ["--ro-bind-try", path, path],
      rank: 0,
    })),
    ...writable.map((path): Mount => ({
      path,
      args: ["--bind-try", path, path],
      rank: 0,
    })),
    { path: "/dev", args: ["--dev", "/dev"], rank: 1 },
    { path: "/proc", args: ["--proc", "/proc"], rank: 1 },
  ];
  if (!bound.some((path) => covers(path, "/tmp"))) {
    mounts.push({ path: "/tmp", args: ["--tmpfs", "/tmp"], rank: 1 });
  }
  const special = ["/dev", "/proc"];
  if (
    !bound.some((path) => covers(path, cwd)) &&
    !special.some((path) => covers(path, cwd)) && cwd !== "/" &&
    cwd !== "/tmp"
  ) {
    mounts.push({ path: cwd, args: ["--dir", cwd], rank: 2 });
  }
  mounts.sort((a, b) => depth(a.path) - depth(b.path) || a.rank - b.rank);

  const argv = [
    options.bwrap,
    "--die-with-parent",
    "--new-session",
    "--unshare-user",
    "--disable-userns",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    ...(options.net ? [] : ["--unshare-net"]),
    "--cap-drop",
    "ALL",
    "--clearenv",
  ];
  for (const [name, value] of Object.entries(options.env)) {
    if (name === "" || name.includes("=") || name.includes("\0")) {
      throw new RangeError(
        `Invalid environment variable name for the sandbox: ${
          JSON.stringify(name)
        }`,
      );
    }
    argv.push("--setenv", name, value);
  }
  for (const mount of mounts) argv.push(...mount.args);
  if (!writable.includes("/")) argv.push("--remount-ro", "/");
  argv.push("--chdir", cwd, "--", ...options.command);
  return argv;
}

/**
 * The argv of a quick run that shows whether bubblewrap works here with the
 * namespaces {@linkcode bwrapArgv} asks for (it may be installed yet unusable,
 * e.g. in a container that forbids user namespaces): the runtime prints its
 * version inside an empty sandbox. Exit code 0 means usable; otherwise
 * bubblewrap says why on stderr.
 *
 * @param bwrap The bubblewrap binary.
 * @param runtimeBinary The runtime binary (real path).
 * @returns The argv.
 *
 * @example
 * ```ts
 * import { bwrapProbeArgv } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * const argv = bwrapProbeArgv("/usr/bin/bwrap", "/opt/deno/deno");
 * assert.deepEqual(argv.slice(-3), ["--", "/opt/deno/deno", "--version"]);
 * ```
 */
export function bwrapProbeArgv(bwrap: string, runtimeBinary: string): string[] {
  return bwrapArgv({
    bwrap,
    runtimeBinary,
    command: [runtimeBinary, "--version"],
    readOnly: [],
    read: [],
    write: [],
    net: false,
    env: {},
    cwd: "/",
  });
}

/**
 * Maps bubblewrap's exit status back to the worker's. bubblewrap keeps the
 * host's pid namespace here and exits with 128 + N when the worker is killed
 * by signal N, so a code in 129..192 that names a known signal becomes that
 * signal. A worker that itself exits with such a code is indistinguishable.
 * bubblewrap's own failures (bad mount, no user namespaces) exit with 1.
 *
 * @param code The exit code of the spawned bubblewrap process.
 * @param signal The signal that ended bubblewrap itself (passed through).
 * @returns The worker's exit status.
 *
 * @example
 * ```ts
 * import { exitFromBwrap } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(exitFromBwrap(137, null), { code: null, signal: "SIGKILL" });
 * assert.deepEqual(exitFromBwrap(3, null), { code: 3, signal: null });
 * assert.deepEqual(exitFromBwrap(null, "SIGTERM"), { code: null, signal: "SIGTERM" });
 * ```
 */
export function exitFromBwrap(
  code: number | null,
  signal: string | null,
): { code: number | null; signal: string | null } {
  if (signal === null && code !== null && code > 128 && code <= 128 + 64) {
    const name = signalName(code - 128);
    if (name !== undefined) return { code: null, signal: name };
  }
  return { code, signal };
}

/**
 * Builds the whole sandboxed command: {@linkcode bwrapArgv} plus what the
 * caller must remember (empty environment for bubblewrap itself, pid from
 * the hello message, exit mapping).
 *
 * @param options As for {@linkcode bwrapArgv}.
 * @returns The plan.
 *
 * @example
 * ```ts
 * import { sandboxPlan } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * const plan = sandboxPlan({
 *   bwrap: "/usr/bin/bwrap",
 *   runtimeBinary: "/usr/local/bin/bun",
 *   command: ["/usr/local/bin/bun", "/app/entry.ts", "file:///app/w.ts"],
 *   readOnly: ["/app"],
 *   read: [],
 *   write: [],
 *   net: false,
 *   env: {},
 *   cwd: "/app",
 * });
 * assert.deepEqual(plan.env, {});
 * assert.deepEqual(plan.mapExit(143, null), { code: null, signal: "SIGTERM" });
 * ```
 */
export function sandboxPlan(options: BwrapOptions): SandboxPlan {
  return {
    argv: bwrapArgv(options),
    env: {},
    pidFromHello: true,
    mapExit: exitFromBwrap,
  };
}

/** Options of {@linkcode sandboxDecision}. */
export interface SandboxDecisionOptions {
  /** The worker's runtime. */
  runtime: "deno" | "bun";
  /** The `sandbox` option, resolved. */
  sandbox: SandboxMode;
  /** The `permissions` option, resolved. */
  permissions: ResolvedPermissions;
  /** The bubblewrap binary, or `undefined` when none was found (or it is unusable). */
  bwrap: string | undefined;
  /** The platform (`process.platform`), e.g. `"linux"`. */
  platform: string;
}

/**
 * Whether to run a worker in the OS sandbox ({@linkcode SandboxDecision}
 * `use`, with the reason), or why it cannot start (`error`).
 */
export type SandboxDecision =
  | { readonly use: boolean; readonly reason: string }
  | {
    /** Why the worker cannot start, as a message detail. */
    readonly error: string;
    /** What cannot be honoured: `"sandbox"` (the `sandbox` option) or `"permissions"`. */
    readonly permission: "sandbox" | "permissions";
  };

/**
 * Decides whether a worker runs in the OS sandbox. The rules:
 *
 * - `permissions: "all"`: never sandboxed; `sandbox: "os"` with it is an
 *   error (the two contradict each other).
 * - `sandbox: "os"`: sandboxed, or an error where the sandbox cannot be had
 *   (not Linux, or no bubblewrap).
 * - `sandbox: "auto"` (the default): sandboxed whenever bubblewrap is
 *   available and the runtime is Bun, or `ffi` or `run` is granted.
 * - Bun without the sandbox (`sandbox: "none"`, or `"auto"` where bubblewrap
 *   is unavailable): Bun has no permission model, so nothing would enforce
 *   the permissions, not even the default "nothing granted". That is an
 *   error unless `permissions.enforce` is `"best-effort"`.
 * - Deno without the sandbox: Deno's flags enforce the permissions on
 *   JavaScript; native code and subprocesses are not confined.
 *
 * @param options The runtime, the options, and what this machine has.
 * @returns `{ use, reason }`, or `{ error }` with a message detail that says
 * how to fix it (no leading "Cannot start worker", no final period).
 *
 * @example Bun on a machine with bubblewrap
 * ```ts
 * import { resolvePermissions } from "./permissions.ts";
 * import { sandboxDecision } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * const decision = sandboxDecision({
 *   runtime: "bun",
 *   sandbox: "auto",
 *   permissions: resolvePermissions(undefined, "/app"),
 *   bwrap: "/usr/bin/bwrap",
 *   platform: "linux",
 * });
 * assert.ok("use" in decision && decision.use);
 * ```
 *
 * @example Bun on macOS, nothing granted, strict
 * ```ts
 * import { resolvePermissions } from "./permissions.ts";
 * import { sandboxDecision } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * const decision = sandboxDecision({
 *   runtime: "bun",
 *   sandbox: "auto",
 *   permissions: resolvePermissions(undefined, "/app"),
 *   bwrap: undefined,
 *   platform: "darwin",
 * });
 * assert.ok("error" in decision);
 * ```
 */
export function sandboxDecision(
  options: SandboxDecisionOptions,
): SandboxDecision {
  const { runtime, sandbox, permissions, bwrap, platform } = options;
  const unavailable = platform !== "linux"
    ? `the OS sandbox needs Linux and bubblewrap, and this platform is "${platform}"`
    : bwrap === undefined
    ? 'bubblewrap ("bwrap") was not found on PATH or cannot run here (install it, e.g. "apt-get install bubblewrap")'
    : undefined;

  if (permissions.all) {
    if (sandbox === "os") {
      return {
        error:
          'sandbox "os" contradicts permissions "all", which grants everything; drop one of them',
        permission: "sandbox",
      };
    }
    return { use: false, reason: 'permissions "all" grants everything' };
  }

  if (sandbox === "os") {
    if (unavailable !== undefined) {
      return {
        error:
          `sandbox "os" was asked for but ${unavailable}; use sandbox "auto" to run without it where it is missing`,
        permission: "sandbox",
      };
    }
    return { use: true, reason: 'sandbox "os" was asked for' };
  }

  if (sandbox === "auto" && unavailable === undefined) {
    if (runtime === "bun") {
      return {
        use: true,
        reason:
          "Bun has no permission model: the OS sandbox enforces the permissions",
      };
    }
    const escapes = (["ffi", "run"] as const).filter((kind) =>
      isGranted(permissions[kind])
    );
    if (escapes.length > 0) {
      return {
        use: true,
        reason: `${
          escapes.join(" and ")
        } granted: native code and subprocesses are not confined by Deno's flags`,
      };
    }
    return { use: false, reason: "Deno's flags enforce the permissions" };
  }

  // No sandbox: "none", or "auto" where it is unavailable.
  const without = sandbox === "none"
    ? 'sandbox "none" turns off the OS sandbox'
    : unavailable ?? "the OS sandbox is unavailable";
  if (runtime === "deno") {
    return {
      use: false,
      reason:
        `Deno's flags enforce the permissions on JavaScript (${without}; native code and subprocesses are not confined)`,
    };
  }
  if (permissions.enforce === "best-effort") {
    return {
      use: false,
      reason:
        `permissions.enforce is "best-effort": Bun enforces no permissions and ${without}`,
    };
  }
  return {
    error:
      `Bun has no permission model and ${without}, so nothing would enforce the permissions (not even the default of nothing granted); ${
        sandbox === "none"
          ? 'use sandbox "auto" on Linux with bubblewrap, '
          : "install bubblewrap, "
      }grant everything with permissions "all", or accept unenforced permissions with permissions.enforce "best-effort"`,
    permission: "permissions",
  };
}

/**
 * Validates the `sandbox` option.
 *
 * @param input The option as given (`undefined`: the default, `"auto"`).
 * @param optionName The option's name in error messages.
 * @returns The mode.
 * @throws {TypeError} when it is not a string.
 * @throws {RangeError} when it is not one of `"none"`, `"os"`, `"auto"`.
 *
 * @example
 * ```ts
 * import { resolveSandboxMode } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(resolveSandboxMode(undefined), "auto");
 * assert.throws(() => resolveSandboxMode("bwrap"), RangeError);
 * ```
 */
export function resolveSandboxMode(
  input: unknown,
  optionName = "sandbox",
): SandboxMode {
  if (input === undefined) return DEFAULT_SANDBOX_MODE;
  if (input === "none" || input === "os" || input === "auto") return input;
  const message =
    `Invalid option "${optionName}": expected "none", "os" or "auto", received ${
      typeof input === "string" ? JSON.stringify(input) : typeof input
    }`;
  throw typeof input === "string"
    ? new RangeError(message)
    : new TypeError(message);
}

/**
 * Where Deno keeps its module caches, and what a sandboxed Deno worker needs
 * of them: `remote` (https: and jsr: modules, airlock itself when installed
 * from JSR) and `npm` (npm: packages without a node_modules directory),
 * read-only. The rest of the cache directory (other programs' localStorage,
 * analysis caches) stays hidden. Set `DENO_DIR` to `denoDir` in the worker's
 * environment: without it, and with no HOME, Deno refuses to start.
 *
 * @param env The parent's environment (`DENO_DIR`, `XDG_CACHE_HOME`, `HOME`).
 * @returns The cache directory and the paths to mount, or `undefined` when
 * none can be determined.
 *
 * @example
 * ```ts
 * import { denoCacheMounts } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(denoCacheMounts({ HOME: "/home/ada" }), {
 *   denoDir: "/home/ada/.cache/deno",
 *   readOnly: ["/home/ada/.cache/deno/remote", "/home/ada/.cache/deno/npm"],
 * });
 * ```
 */
export function denoCacheMounts(
  env: Readonly<Record<string, string | undefined>>,
): { denoDir: string; readOnly: string[] } | undefined {
  let denoDir: string | undefined;
  if (env.DENO_DIR && posix.isAbsolute(env.DENO_DIR)) denoDir = env.DENO_DIR;
  else if (env.XDG_CACHE_HOME && posix.isAbsolute(env.XDG_CACHE_HOME)) {
    denoDir = posix.join(env.XDG_CACHE_HOME, "deno");
  } else if (env.HOME && posix.isAbsolute(env.HOME)) {
    denoDir = posix.join(env.HOME, ".cache", "deno");
  }
  if (denoDir === undefined) return undefined;
  denoDir = normalizePath(denoDir, "DENO_DIR");
  return {
    denoDir,
    readOnly: [posix.join(denoDir, "remote"), posix.join(denoDir, "npm")],
  };
}

/** Options of {@linkcode workerMounts}. */
export interface WorkerMountsOptions {
  /** The worker's runtime. */
  runtime: "deno" | "bun";
  /** The user's module: an absolute path, or `undefined` when it is remote. */
  module: string | undefined;
  /** airlock's `workers/entry.ts` (or `.js`): an absolute path, or `undefined` when remote (JSR). */
  entry: string | undefined;
  /**
   * The Deno config file passed with `--config`, if any.
   *
   * @default {undefined}
   */
  config?: string | undefined;
  /** The parent's environment, for Deno's cache directory. */
  env: Readonly<Record<string, string | undefined>>;
}

/** What {@linkcode workerMounts} found. */
export interface WorkerMounts {
  /** Paths to pass as {@linkcode BwrapOptions} `readOnly`. All exist. */
  readOnly: string[];
  /** Deno's cache directory, to set as `DENO_DIR` in the worker's environment (Deno only). */
  denoDir: string | undefined;
}

/**
 * The nearest directory at or above `start` that holds a `package.json`,
 * `deno.json` or `deno.jsonc`: the module's project.
 *
 * @param start The module's directory.
 * @returns The project directory, or `start` when there is none.
 */
export function projectRoot(start: string): string {
  for (let dir = start;; dir = dirname(dir)) {
    for (const name of ["package.json", "deno.json", "deno.jsonc"]) {
      if (existsSync(join(dir, name))) return dir;
    }
    if (dirname(dir) === dir) return start;
  }
}

/** Config files a runtime reads beside the code, looked up in the module's directory and its ancestors. */
const CONFIG_FILES: readonly string[] = [
  "package.json",
  "deno.json",
  "deno.jsonc",
  "deno.lock",
  "import_map.json",
  "tsconfig.json",
  "jsconfig.json",
  "bunfig.toml",
];

/**
 * The read-only paths a worker needs to start and import its code, found on
 * disk: the module's project (the nearest directory above it holding a
 * `package.json`, `deno.json` or `deno.jsonc`, else the module's own
 * directory), every `node_modules` from there up to the root plus the real
 * locations of packages linked into them (workspaces), the config files of
 * those directories and of `config`'s, airlock's own code (`workers/`,
 * `src/`, `mod.ts`, `worker.ts`) and, for Deno, its module caches
 * ({@linkcode denoCacheMounts}). Code the module imports from outside its
 * project, other than packages, needs a read grant.
 *
 * @param options Where the module, airlock and the config are.
 * @returns The paths and Deno's cache directory.
 *
 * @example
 * ```ts
 * import { workerMounts } from "./sandbox.ts";
 * import assert from "node:assert/strict";
 *
 * const mounts = workerMounts({
 *   runtime: "bun",
 *   module: undefined,
 *   entry: undefined,
 *   env: {},
 * });
 * assert.deepEqual(mounts, { readOnly: [], denoDir: undefined });
 * ```
 */
export function workerMounts(options: WorkerMountsOptions): WorkerMounts {
  const found = new Set<string>();
  const add = (path: string): void => {
    if (existsSync(path)) found.add(path);
  };
  const ancestors = (start: string): string[] => {
    const dirs = [start];
    for (let dir = start; dirname(dir) !== dir;) {
      dir = dirname(dir);
      dirs.push(dir);
    }
    return dirs;
  };
  const starts: string[] = [];
  if (options.module !== undefined) {
    const dir = dirname(options.module);
    add(projectRoot(dir));
    starts.push(dir);
  }
  if (options.config !== undefined) {
    add(options.config);
    starts.push(dirname(options.config));
  }
  for (const start of starts) {
    for (const dir of ancestors(start)) {
      for (const name of CONFIG_FILES) add(join(dir, name));
      const modules = join(dir, "node_modules");
      if (existsSync(modules)) {
        found.add(modules);
        for (const target of linkedPackages(modules)) found.add(target);
      }
    }
  }
  if (options.entry !== undefined) {
    const workers = dirname(options.entry);
    if (basename(workers) === "workers") {
      const root = dirname(workers);
      add(workers);
      add(join(root, "src"));
      for (const name of ["mod", "worker"]) {
        add(join(root, `${name}.ts`));
        add(join(root, `${name}.js`));
      }
    } else {
      add(workers);
    }
  }
  let denoDir: string | undefined;
  if (options.runtime === "deno") {
    const cache = denoCacheMounts(options.env);
    if (cache !== undefined) {
      denoDir = cache.denoDir;
      for (const path of cache.readOnly) add(path);
    }
  }
  return { readOnly: [...found], denoDir };
}

/** Real locations of packages symlinked into a node_modules directory (workspaces, `npm link`) that lie outside it. */
function linkedPackages(modules: string): string[] {
  const targets: string[] = [];
  const visit = (dir: string, depth: number): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const path = join(dir, entry.name);
      if (entry.isSymbolicLink()) {
        try {
          const target = realpathSync(path);
          if (!covers(modules, target) && statSync(target).isDirectory()) {
            targets.push(target);
          }
        } catch {
          // A dangling link: nothing to mount.
        }
      } else if (
        depth === 0 && entry.isDirectory() && entry.name.startsWith("@")
      ) {
        visit(path, 1);
      }
    }
  };
  visit(modules, 0);
  return targets;
}

interface Mount {
  /** The destination, for ordering. */
  path: string;
  /** The bubblewrap arguments. */
  args: string[];
  /** Order among mounts of the same depth: binds, then special, then made dirs. */
  rank: number;
}

function scopesToPaths(scopes: ResolvedScopes, name: string): string[] {
  if (scopes === true) return ["/"];
  return scopes.map((path, index) => normalizePath(path, `${name}[${index}]`));
}

function normalizePath(path: string, name: string): string {
  if (typeof path !== "string" || !posix.isAbsolute(path)) {
    throw new RangeError(
      `Invalid sandbox path "${name}": expected an absolute path, received ${
        JSON.stringify(path)
      }`,
    );
  }
  const normalized = posix.normalize(path);
  return normalized.length > 1 ? normalized.replace(/\/+$/, "") : normalized;
}

/** Whether `outer` is `inner` or one of its ancestors. */
function covers(outer: string, inner: string): boolean {
  if (outer === "/") return true;
  return inner === outer || inner.startsWith(`${outer}/`);
}

/** The paths not covered by another one of the list, deduplicated. */
function minimal(paths: readonly string[]): string[] {
  const unique = [...new Set(paths)];
  return unique.filter((path) =>
    !unique.some((other) => other !== path && covers(other, path))
  );
}

function depth(path: string): number {
  return path === "/" ? 0 : path.split("/").length - 1;
}
