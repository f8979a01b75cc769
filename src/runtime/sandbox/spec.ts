/**
 * What the parent tells the confine step: the Landlock ruleset, the seccomp
 * program and the command to exec. It travels as one JSON argument of the
 * step (never through a file a worker could write), and the step checks its
 * shape before it acts on it.
 *
 * @module
 */

import type { LandlockRuleset } from "./landlock.ts";

/** The version of {@linkcode ConfineSpec}'s shape. */
export const CONFINE_SPEC_VERSION = 1;

/** The exit code of a confine step that could not confine (it says why on stderr). */
export const CONFINE_FAILED_EXIT_CODE = 126;

/**
 * The Landlock rights that apply to a file rather than a directory
 * (`EXECUTE`, `WRITE_FILE`, `READ_FILE`, `TRUNCATE`, `IOCTL_DEV`): the step
 * keeps only these in a rule on a file. Here, not in `landlock.ts`, so that
 * the step loads nothing but this module.
 */
export const LANDLOCK_ACCESS_FILE: number = (1 << 0) | (1 << 1) | (1 << 2) |
  (1 << 14) | (1 << 15);

/**
 * The prefix under which the confine step receives the worker's variables.
 * The step runs before any confinement, so no variable its runtime or the
 * dynamic loader acts on (`LD_PRELOAD`, `BUN_OPTIONS=--preload=…`,
 * `NODE_OPTIONS`, …) may reach it under its own name: every variable of the
 * worker travels as `AIRLOCK_CONFINE_HELD_<NAME>` (in the environment, never
 * on the command line, where any process could read its value), and the step
 * gives each back its name at `execve`, after confinement.
 */
export const CONFINE_HELD_ENV_PREFIX = "AIRLOCK_CONFINE_HELD_";

/** The prefix of every line the confine step writes to stderr. */
export const CONFINE_STDERR_PREFIX = "airlock confine:";

/** Everything the confine step does, in order. */
export interface ConfineSpec {
  /** {@linkcode CONFINE_SPEC_VERSION}. */
  readonly v: number;
  /** The directory to change to before exec: the worker's working directory. */
  readonly cwd: string;
  /** The Landlock ruleset to apply, or `null` for none. */
  readonly landlock: LandlockRuleset | null;
  /** The seccomp program (base64 of its `sock_filter` bytes), or `""` for none. */
  readonly seccomp: string;
  /** The command to exec; a program without a slash is looked up on the step's PATH. */
  readonly argv: readonly string[];
  /**
   * Changes from the step's environment to the worker's, applied after the
   * held variables ({@linkcode CONFINE_HELD_ENV_PREFIX}) get their names
   * back: a value replaces the variable, `null` removes the step's own
   * (a held variable of the same name is the worker's and stays). The step itself may need variables the
   * worker must not see or must see otherwise (Deno's `DENO_DIR`: the step
   * reads its compiled code from the parent's cache, which a worker with a
   * writable cache of its own could otherwise poison).
   */
  readonly env: Readonly<Record<string, string | null>>;
  /**
   * A program the step starts before it confines itself (the network
   * forwarder of a worker with `host:port` grants: it keeps the sandbox's
   * capabilities, the worker gets none), with its whole environment; absent:
   * none.
   */
  readonly forwarder?: {
    readonly argv: readonly string[];
    readonly env: Readonly<Record<string, string>>;
    /**
     * Granted addresses outside loopback the step adds to the sandbox's
     * loopback interface before it starts the forwarder, each
     * `"4,<8 hex digits>"` or `"6,<32 hex digits>"` (network order);
     * absent: none.
     */
    readonly localAddresses?: readonly string[];
  };
}

/**
 * Encodes a spec as the step's argument.
 *
 * @param spec The spec.
 * @returns JSON text.
 */
export function encodeConfineSpec(spec: ConfineSpec): string {
  return JSON.stringify(spec);
}

/**
 * Parses a spec's JSON object and checks its version.
 *
 * @returns The object, and `fail`, which throws a TypeError naming the spec.
 */
function parseSpec(text: string, kind: string): {
  spec: Record<string, unknown>;
  fail: (what: string) => never;
} {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error: unknown) {
    throw new TypeError(`Invalid ${kind} spec: not JSON`, { cause: error });
  }
  const fail = (what: string): never => {
    throw new TypeError(`Invalid ${kind} spec: ${what}`);
  };
  if (typeof value !== "object" || value === null) fail("not an object");
  const spec = value as Record<string, unknown>;
  if (spec.v !== CONFINE_SPEC_VERSION) {
    fail(`version ${JSON.stringify(spec.v)}, expected ${CONFINE_SPEC_VERSION}`);
  }
  return { spec, fail };
}

/** A non-empty list of strings without NUL: a command's argv. */
function isArgv(value: unknown): value is string[] {
  return Array.isArray(value) && value.length > 0 &&
    value.every((arg) => typeof arg === "string" && !arg.includes("\0"));
}

/** A map of variable names to strings (or null: unset), without NUL. */
function isEnv(value: unknown): boolean {
  return typeof value === "object" && value !== null &&
    !Array.isArray(value) &&
    Object.entries(value).every(([name, entry]) =>
      name !== "" && !name.includes("=") && !name.includes("\0") &&
      (entry === null || (typeof entry === "string" && !entry.includes("\0")))
    );
}

/**
 * Decodes and checks the step's argument.
 *
 * @param text The JSON text.
 * @returns The spec.
 * @throws {TypeError} when it is not a spec of this version.
 *
 * @example
 * ```ts
 * import { decodeConfineSpec, encodeConfineSpec } from "./spec.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = {
 *   v: 1,
 *   cwd: "/",
 *   landlock: null,
 *   seccomp: "",
 *   argv: ["/bin/true"],
 *   env: { DENO_DIR: null },
 * };
 * assert.deepEqual(decodeConfineSpec(encodeConfineSpec(spec)), spec);
 * assert.throws(() => decodeConfineSpec("{}"), TypeError);
 * ```
 */
export function decodeConfineSpec(text: string): ConfineSpec {
  const { spec, fail } = parseSpec(text, "confine");
  if (typeof spec.cwd !== "string" || !spec.cwd.startsWith("/")) {
    fail("cwd is not an absolute path");
  }
  if (typeof spec.seccomp !== "string") fail("seccomp is not a string");
  const argv = spec.argv;
  if (!isArgv(argv)) fail("argv is not a non-empty list of strings");
  const env = spec.env;
  if (!isEnv(env)) {
    fail("env is not a map of variable names to strings or null");
  }
  const forwarder = spec.forwarder;
  if (forwarder !== undefined) {
    const f = forwarder as Record<string, unknown> | null;
    if (
      typeof f !== "object" || f === null || !isArgv(f.argv) ||
      typeof f.env !== "object" || f.env === null ||
      !Object.entries(f.env).every(([name, value]) =>
        name !== "" && !name.includes("=") && typeof value === "string"
      )
    ) fail("forwarder is not a command with an environment");
    const local = (f as Record<string, unknown>).localAddresses;
    if (
      local !== undefined &&
      (!Array.isArray(local) ||
        !local.every((item) =>
          typeof item === "string" &&
          /^(4,[0-9a-f]{8}|6,[0-9a-f]{32})$/.test(item)
        ))
    ) fail("forwarder.localAddresses is not a list of FAMILY,HEX addresses");
  }
  const ruleset = spec.landlock;
  if (ruleset !== null) {
    if (typeof ruleset !== "object" || ruleset === undefined) {
      fail("landlock is not an object");
    }
    const r = ruleset as Record<string, unknown>;
    for (const key of ["abi", "handledFs", "handledNet", "scoped"]) {
      if (!Number.isInteger(r[key]) || (r[key] as number) < 0) {
        fail(`landlock.${key} is not a natural number`);
      }
    }
    const paths = r.paths;
    if (
      !Array.isArray(paths) ||
      !paths.every((rule) =>
        typeof rule === "object" && rule !== null &&
        typeof rule.path === "string" && rule.path.startsWith("/") &&
        !rule.path.includes("\0") && Number.isInteger(rule.access) &&
        (rule.exact === undefined || typeof rule.exact === "boolean") &&
        (rule.required === undefined || typeof rule.required === "boolean")
      )
    ) fail("landlock.paths is not a list of path rules");
    const ports = r.ports;
    if (
      !Array.isArray(ports) ||
      !ports.every((rule) =>
        typeof rule === "object" && rule !== null &&
        Number.isInteger(rule.port) && rule.port >= 0 &&
        rule.port <= 65535 && Number.isInteger(rule.access)
      )
    ) fail("landlock.ports is not a list of port rules");
  }
  return spec as unknown as ConfineSpec;
}

/**
 * What the step does in its `--bind-fds` form, run before bubblewrap on the
 * host: open each path without following any link (`openat2` with
 * `RESOLVE_NO_SYMLINKS`, `O_PATH`, inherited across `execve`), put each
 * descriptor's number into the argv slot named, and exec the argv
 * (bubblewrap, which binds the descriptors with `--bind-fd`/`--ro-bind-fd`).
 * It confines nothing itself.
 */
export interface BindFdsSpec {
  /** {@linkcode CONFINE_SPEC_VERSION}. */
  readonly v: number;
  /** The paths to open, and the argv slot each descriptor's number goes in. */
  readonly fds: readonly { readonly path: string; readonly arg: number }[];
  /** The command to exec (its slots hold a placeholder). */
  readonly argv: readonly string[];
  /** Changes to the environment, as {@linkcode ConfineSpec} `env`. */
  readonly env: Readonly<Record<string, string | null>>;
}

/** The step's first argument for its {@linkcode BindFdsSpec} form. */
export const BIND_FDS_FLAG = "--bind-fds";

/**
 * Decodes and checks a {@linkcode BindFdsSpec}.
 *
 * @param text The JSON text.
 * @returns The spec.
 * @throws {TypeError} when it is not a spec of this version.
 *
 * @example
 * ```ts
 * import { decodeBindFdsSpec } from "./spec.ts";
 * import assert from "node:assert/strict";
 *
 * const spec = { v: 1, fds: [{ path: "/data", arg: 2 }], argv: ["/usr/bin/bwrap", "--ro-bind-fd", "-1", "/data"], env: {} };
 * assert.deepEqual(decodeBindFdsSpec(JSON.stringify(spec)), spec);
 * assert.throws(() => decodeBindFdsSpec('{"v":1,"fds":[{"path":"/d","arg":0}],"argv":["x"],"env":{}}'), TypeError);
 * ```
 */
export function decodeBindFdsSpec(text: string): BindFdsSpec {
  const { spec, fail } = parseSpec(text, "bind-fds");
  const argv = spec.argv;
  if (!isArgv(argv)) fail("argv is not a non-empty list of strings");
  const fds = spec.fds;
  if (
    !Array.isArray(fds) ||
    !fds.every((entry) =>
      typeof entry === "object" && entry !== null &&
      typeof entry.path === "string" && entry.path.startsWith("/") &&
      !entry.path.includes("\0") && Number.isInteger(entry.arg) &&
      entry.arg > 0 && entry.arg < (argv as string[]).length
    )
  ) fail("fds is not a list of paths and argv slots (after the program)");
  const env = spec.env;
  if (!isEnv(env)) {
    fail("env is not a map of variable names to strings or null");
  }
  return spec as unknown as BindFdsSpec;
}
