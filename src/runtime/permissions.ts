/**
 * What a worker may do: the `permissions` option, its validation, and its
 * translation into Deno's permission flags. Nothing is granted by default, on
 * both runtimes. Deno enforces the flags on JavaScript; the OS sandbox
 * (bubblewrap and Landlock, in `sandbox/`: `sandbox/plan.ts` decides, the
 * rest of the folder builds it) enforces the same grants on everything in the process,
 * native code included, and is the only enforcement on Bun.
 *
 * @module
 */

import { fileURLToPath, isAbsolute, resolve } from "./node_builtins.ts";
import { describe, toPath } from "../_validate.ts";

/** The kinds whose scopes are paths, and so may be given as `URL` objects. */
const PATH_KINDS: ReadonlySet<string> = new Set([
  "read",
  "write",
  "ffi",
  "run",
]);

/**
 * What a worker may do. Each field is either `true` (everything of that
 * kind), `false` or absent (nothing), or a list of scopes. Nothing is granted
 * by default.
 *
 * Path scopes (`read`, `write`, `ffi`, and `run` entries that contain a
 * slash) may be relative: they resolve against the worker's `cwd` and become
 * absolute. `file:` URLs (strings or `URL` objects, as `cwd` and `watch`
 * take) are accepted and converted to paths. Scopes may not
 * contain a comma, which Deno's flags use as their separator.
 *
 * @example Read and write one directory, nothing else
 * ```ts
 * import type { Permissions } from "@airlock/airlock";
 *
 * const permissions: Permissions = { read: ["./data"], write: ["./data"] };
 * ```
 */
export interface Permissions {
  /**
   * Files and directories the worker may read (a directory grants its whole
   * tree). Relative paths resolve against `cwd`.
   *
   * @default {false}
   */
  read?: readonly (string | URL)[] | boolean;
  /**
   * Files and directories the worker may write, create and delete in.
   * Relative paths resolve against `cwd`. Under the OS sandbox a write grant
   * also makes the path readable, and a path must exist when the worker
   * starts to be visible at all.
   *
   * @default {false}
   */
  write?: readonly (string | URL)[] | boolean;
  /**
   * Hosts the worker may connect to: `"host:port"`, `"127.0.0.1:5432"`,
   * `"[::1]:8080"`. Under bubblewrap each `host:port` is exact for every
   * process of the worker, native code included (its own network namespace;
   * the parent connects for it); a strict worker whose scopes cannot be held
   * so (no bubblewrap, a scope without a port, a wildcard, an address
   * outside loopback) does not start (`PermissionError`, `permission:
   * "net"`). `true`: the host's whole network. See docs/permissions.md.
   *
   * @default {false}
   */
  net?: readonly string[] | boolean;
  /**
   * Environment variables the worker may read, by name (Deno accepts a
   * trailing `*` as a prefix wildcard, e.g. `"AWS_*"`). Which variables the
   * worker is given at all is the separate `env` option.
   *
   * @default {false}
   */
  env?: readonly string[] | boolean;
  /**
   * Programs the worker may start: names looked up on PATH, or paths.
   * Subprocesses are not confined by Deno's flags; under the OS sandbox they
   * share the worker's confinement.
   *
   * @default {false}
   */
  run?: readonly (string | URL)[] | boolean;
  /**
   * Native libraries the worker may load (Deno `dlopen`, `bun:ffi`, Node-API
   * addons), by path. Loaded native code is not confined by Deno's flags;
   * granting `ffi` makes `sandbox: "auto"` use the OS sandbox.
   *
   * @default {false}
   */
  ffi?: readonly (string | URL)[] | boolean;
  /**
   * System information APIs the worker may call, by Deno's names
   * (`"hostname"`, `"osRelease"`, `"systemMemoryInfo"`, …). The OS sandbox
   * does not hide system information.
   *
   * @default {false}
   */
  sys?: readonly string[] | boolean;
  /**
   * What happens when nothing can enforce these permissions (a Bun worker
   * without the OS sandbox): `"strict"` refuses to start the worker with a
   * clear error; `"best-effort"` starts it anyway, enforcing what can be
   * enforced (on Bun without the sandbox: nothing).
   *
   * @default {"strict"}
   */
  enforce?: "strict" | "best-effort";
  /**
   * Whether the sandbox must refuse every change of metadata (mode, owner,
   * times, extended attributes) of files outside the write grants.
   * `"strict"` starts the worker only under bubblewrap, where read grants
   * are read-only mounts: under Landlock alone the seccomp filter refuses
   * the path-based calls (`chmod`, `chown`, `utimes`, `setxattr`), but a
   * worker can still change, through a descriptor (`fchmod`), a file it may
   * read and owns (as root: every root-owned file it may read), and the
   * start fails with a `PermissionError` instead. It also refuses a worker
   * run as root (the parent's effective uid is 0): bubblewrap binds the
   * host's `/dev/null` and its other device nodes writable, and `/proc`'s
   * entries are the host's, which root may `fchmod`. `"best-effort"`
   * accepts those holds.
   *
   * @default {"best-effort"}
   */
  metadata?: "strict" | "best-effort";
}

/**
 * The `permissions` option: a {@linkcode Permissions} object, or `"all"`, the
 * explicit opt-out that grants everything (Deno `-A`) and needs no sandbox.
 */
export type PermissionsOption = Permissions | "all";

/** One kind of permission, as resolved: everything (`true`) or a list of scopes (empty: nothing). */
export type ResolvedScopes = true | readonly string[];

/**
 * Permissions after validation: paths absolute, lists deduplicated, absent
 * and `false` fields turned into empty lists.
 */
export interface ResolvedPermissions {
  /** Whether everything was granted (`"all"`). Every kind is then `true`. */
  readonly all: boolean;
  /** Readable paths (absolute), or `true`. */
  readonly read: ResolvedScopes;
  /** Writable paths (absolute), or `true`. */
  readonly write: ResolvedScopes;
  /** Reachable hosts, or `true`. */
  readonly net: ResolvedScopes;
  /** Readable environment variable names, or `true`. */
  readonly env: ResolvedScopes;
  /** Startable programs (names, or absolute paths), or `true`. */
  readonly run: ResolvedScopes;
  /** Loadable native libraries (absolute paths), or `true`. */
  readonly ffi: ResolvedScopes;
  /** Callable system information APIs, or `true`. */
  readonly sys: ResolvedScopes;
  /** What to do when nothing can enforce these permissions. */
  readonly enforce: "strict" | "best-effort";
  /** `"strict"` when every metadata change outside the write grants must be refused (absent: best effort). */
  readonly metadata?: "strict";
}

/** The permission kinds, in flag order. */
export const PERMISSION_KINDS: readonly PermissionKind[] = [
  "read",
  "write",
  "net",
  "env",
  "run",
  "ffi",
  "sys",
];

/** One kind of permission. */
export type PermissionKind =
  | "read"
  | "write"
  | "net"
  | "env"
  | "run"
  | "ffi"
  | "sys";

const KNOWN_KEYS: ReadonlySet<string> = new Set<string>([
  ...PERMISSION_KINDS,
  "enforce",
  "metadata",
]);

/**
 * Validates the `permissions` option and resolves it against the worker's
 * working directory.
 *
 * @param input The option as given (`undefined`: nothing granted).
 * @param cwd The worker's working directory (absolute), against which
 * relative paths resolve.
 * @param optionName The option's name in error messages.
 * @returns The resolved permissions.
 * @throws {TypeError} when the option or one of its fields has the wrong type
 * or an unknown key.
 * @throws {RangeError} when a value is out of range: an unknown string, an
 * empty scope, a scope with a comma, a URL given as a net scope.
 *
 * @example Relative paths become absolute
 * ```ts
 * import { resolvePermissions } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const resolved = resolvePermissions({ read: ["./data", "/srv/ref"] }, "/app");
 * assert.deepEqual(resolved.read, ["/app/data", "/srv/ref"]);
 * assert.deepEqual(resolved.write, []);
 * assert.equal(resolved.all, false);
 * ```
 *
 * @example The explicit opt-out
 * ```ts
 * import { resolvePermissions } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(resolvePermissions("all", "/app").all, true);
 * ```
 */
export function resolvePermissions(
  input: PermissionsOption | undefined,
  cwd: string,
  optionName = "permissions",
): ResolvedPermissions {
  if (input === "all") {
    return {
      all: true,
      read: true,
      write: true,
      net: true,
      env: true,
      run: true,
      ffi: true,
      sys: true,
      enforce: "strict",
    };
  }
  if (input === undefined) {
    return {
      all: false,
      read: [],
      write: [],
      net: [],
      env: [],
      run: [],
      ffi: [],
      sys: [],
      enforce: "strict",
    };
  }
  if (typeof input === "string") {
    throw new RangeError(
      `Invalid option "${optionName}": expected an object or "all", received ${
        describe(input)
      }`,
    );
  }
  if (typeof input !== "object" || input === null || Array.isArray(input)) {
    throw new TypeError(
      `Invalid option "${optionName}": expected an object or "all", received ${
        describe(input)
      }`,
    );
  }
  if (!isAbsolute(cwd)) {
    throw new RangeError(
      `Cannot resolve option "${optionName}": the working directory must be absolute, received ${
        describe(cwd)
      }`,
    );
  }
  for (const key of Object.keys(input)) {
    if (!KNOWN_KEYS.has(key)) {
      throw new TypeError(
        `Invalid option "${optionName}.${key}": not a permission (expected one of ${
          [...KNOWN_KEYS].join(", ")
        })`,
      );
    }
  }
  const enforce = input.enforce ?? "strict";
  if (enforce !== "strict" && enforce !== "best-effort") {
    const message =
      `Invalid option "${optionName}.enforce": expected "strict" or "best-effort", received ${
        describe(enforce)
      }`;
    throw typeof enforce === "string"
      ? new RangeError(message)
      : new TypeError(message);
  }
  const metadata = input.metadata ?? "best-effort";
  if (metadata !== "strict" && metadata !== "best-effort") {
    const message =
      `Invalid option "${optionName}.metadata": expected "strict" or "best-effort", received ${
        describe(metadata)
      }`;
    throw typeof metadata === "string"
      ? new RangeError(message)
      : new TypeError(message);
  }
  const field = (kind: PermissionKind): ResolvedScopes =>
    resolveScopes(input[kind], kind, cwd, `${optionName}.${kind}`);
  return {
    all: false,
    read: field("read"),
    write: field("write"),
    net: field("net"),
    env: field("env"),
    run: field("run"),
    ffi: field("ffi"),
    sys: field("sys"),
    enforce,
    ...(metadata === "strict" ? { metadata } : {}),
  };
}

/**
 * Whether a resolved kind grants anything.
 *
 * @param scopes The resolved kind.
 * @returns `true` for `true` and for a non-empty list.
 *
 * @example
 * ```ts
 * import { isGranted } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isGranted([]), false);
 * assert.equal(isGranted(["/data"]), true);
 * assert.equal(isGranted(true), true);
 * ```
 */
export function isGranted(scopes: ResolvedScopes): boolean {
  return scopes === true || scopes.length > 0;
}

function resolveScopes(
  value: unknown,
  kind: PermissionKind,
  cwd: string,
  name: string,
): ResolvedScopes {
  if (value === undefined || value === false) return [];
  if (value === true) return true;
  if (!Array.isArray(value)) {
    throw new TypeError(
      `Invalid option "${name}": expected an array of strings or a boolean, received ${
        describe(value)
      }`,
    );
  }
  const scopes: string[] = [];
  value.forEach((entry: unknown, index) => {
    const at = `${name}[${index}]`;
    if (entry instanceof URL && PATH_KINDS.has(kind)) {
      scopes.push(resolveScope(toPath(at, entry, cwd), kind, cwd, at));
      return;
    }
    if (typeof entry !== "string") {
      throw new TypeError(
        `Invalid option "${at}": expected a string, received ${
          describe(entry)
        }`,
      );
    }
    scopes.push(resolveScope(entry, kind, cwd, at));
  });
  return dedupe(scopes);
}

function resolveScope(
  entry: string,
  kind: PermissionKind,
  cwd: string,
  at: string,
): string {
  const fail = (expected: string): never => {
    throw new RangeError(
      `Invalid option "${at}": expected ${expected}, received ${
        describe(entry)
      }`,
    );
  };
  if (entry.trim() === "") fail("a non-empty scope");
  if (entry.includes("\0")) fail("a scope without NUL characters");
  if (entry.includes(",")) {
    fail("a scope without a comma (Deno's flags cannot express one)");
  }
  switch (kind) {
    case "read":
    case "write":
    case "ffi":
      return resolvePath(entry, cwd, at);
    case "run":
      // A bare name is looked up on PATH; anything with a slash is a path.
      return entry.includes("/") || entry.startsWith("file:")
        ? resolvePath(entry, cwd, at)
        : entry;
    case "net": {
      const problem = netScopeProblem(entry);
      if (problem !== undefined) fail(problem);
      return entry;
    }
    case "env":
      if (envNameProblem(entry) !== undefined || /\s/.test(entry)) {
        fail("a variable name");
      }
      return entry;
    case "sys":
      if (!/^[A-Za-z]+$/.test(entry)) {
        fail('a system API name (e.g. "hostname")');
      }
      return entry;
  }
}

/**
 * What is wrong with an environment variable name, or `undefined` when it
 * is one both runtimes and the sandbox can pass: not empty, without `=` or
 * NUL. The one check for `env`, `inheritEnv` and `permissions.env`.
 *
 * @param name The name.
 * @returns The expectation it fails, or `undefined`.
 *
 * @example
 * ```ts
 * import { envNameProblem } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(envNameProblem("DB_URL"), undefined);
 * assert.equal(typeof envNameProblem("A=B"), "string");
 * assert.equal(typeof envNameProblem(""), "string");
 * ```
 */
export function envNameProblem(name: string): string | undefined {
  if (name === "") return "a non-empty variable name";
  if (name.includes("=")) return 'a variable name without "="';
  if (name.includes("\0")) return "a variable name without NUL characters";
  return undefined;
}

const LABEL = /^[A-Za-z0-9_-]+$/;

/**
 * What is wrong with a `net` scope, or `undefined` when Deno accepts it
 * (and the sandbox, which cannot filter by host, honours it as any grant):
 * a host name (optionally `*.`-prefixed), an IPv4 address or a bracketed
 * IPv6 address, with an optional port from 0 to 65535, or `:port` alone.
 * `"*"` is not a host: every host is `net: true`.
 *
 * @param scope The scope.
 * @returns The expectation it fails, or `undefined`.
 *
 * @example
 * ```ts
 * import { netScopeProblem } from "./permissions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(netScopeProblem("db.internal:5432"), undefined);
 * assert.equal(netScopeProblem("[::1]:8080"), undefined);
 * assert.equal(typeof netScopeProblem("*"), "string");
 * assert.equal(typeof netScopeProblem("host:99999"), "string");
 * ```
 */
export function netScopeProblem(scope: string): string | undefined {
  const expected = 'a host with an optional port (e.g. "example.com:443")';
  if (scope === "*") {
    return 'a host ("*" is not one: grant net: true for every host)';
  }
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]*)(?::(\d+))?$/.exec(scope);
  if (!match) return expected;
  const host = match[1] ?? "";
  const port = match[2];
  if (port !== undefined && (port.length > 5 || Number(port) > 65535)) {
    return "a port from 0 to 65535";
  }
  if (host.startsWith("[")) return host.includes(":") ? undefined : expected;
  if (host === "") return port === undefined ? expected : undefined;
  const name = host.startsWith("*.") ? host.slice(2) : host;
  const labels = name.endsWith(".")
    ? name.slice(0, -1).split(".")
    : name.split(".");
  return labels.every((label) => LABEL.test(label)) ? undefined : expected;
}

function resolvePath(entry: string, cwd: string, at: string): string {
  if (entry.startsWith("file:")) {
    try {
      return resolve(fileURLToPath(entry));
    } catch (error: unknown) {
      throw new RangeError(
        `Invalid option "${at}": expected a path or a file: URL, received ${
          describe(entry)
        }`,
        { cause: error },
      );
    }
  }
  return resolve(cwd, entry);
}

/**
 * The scopes without repeats, in first-seen order.
 *
 * @param scopes The scopes.
 * @returns Each scope once.
 */
export function dedupe(scopes: readonly string[]): string[] {
  return [...new Set(scopes)];
}
