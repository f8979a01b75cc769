/**
 * The bubblewrap (`bwrap`) command line of a sandboxed worker: pure
 * functions from paths and resolved permissions to an argv. bubblewrap runs
 * the worker in its own mount, pid, network, IPC, UTS and user namespaces,
 * so that everything in the process, native code included, sees only the
 * runtime, its libraries, the worker's code and the granted paths. What to
 * mount for the code is found by `mounts.ts`; whether to sandbox at all is
 * decided by `plan.ts`.
 *
 * See docs/permissions.md for what each layer enforces on each runtime.
 *
 * @module
 */

import { isAbsolute } from "../node_builtins.ts";
import type { ResolvedPermissions, ResolvedScopes } from "../permissions.ts";
import { envNameProblem, isGranted } from "../permissions.ts";
import { covers, depth, minimal, normalizePath } from "./paths.ts";
import { isStartupVariable } from "./bwrap_environment.ts";

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
 * The network files a worker with forwarded `host:port` grants gets: TLS
 * roots and the services and protocols tables. Its `/etc/hosts` and
 * `/etc/nsswitch.conf` are the broker's (the granted names on loopback), and
 * it has no `/etc/resolv.conf`: it needs no DNS.
 */
export const FORWARDED_NETWORK_PATHS: readonly string[] = NETWORK_PATHS.filter(
  (path) =>
    ![
      "/etc/resolv.conf",
      "/etc/hosts",
      "/etc/nsswitch.conf",
      "/etc/host.conf",
      "/etc/gai.conf",
    ].includes(path),
);

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
  /** The bubblewrap binary (its real path). */
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
  /**
   * A file descriptor (open in bubblewrap) holding a seccomp BPF program,
   * installed on the worker (`--seccomp FD`).
   *
   * @default {undefined}
   */
  seccompFd?: string;
  /**
   * A program bubblewrap makes inside the sandbox from the bytes it reads
   * on a descriptor to its end (`--perms 0555 --ro-bind-data FD PATH`):
   * read-only, executable, in the sandbox's own `/dev` (the native confine
   * step). Never a file on the host.
   *
   * @default {undefined}
   */
  embedded?: { fd: string; path: string };
  /**
   * Descriptors (open in bubblewrap) on the user and pid namespaces the
   * parent's workers share (`pid_namespace.ts`): the worker joins them
   * (`--userns`, `--pidns`) instead of making its own, and bubblewrap
   * checks that it cannot make a user namespace (`--assert-userns-disabled`:
   * the shared one allows none). Omitted: new user and pid namespaces, nested
   * user namespaces disabled.
   *
   * @default {undefined}
   */
  joinPidNamespace?: { userFd: string; pidFd: string };
  /**
   * Whether bubblewrap dies with its parent and kills the worker when it
   * dies (`--die-with-parent`). `false` only where the worker dies with the
   * parent by other means (the shared pid namespace's holder) and with
   * bubblewrap through a parent-death signal of its own (`setpriv` inside).
   *
   * @default {true}
   */
  dieWithParent?: boolean;
  /**
   * Paths that get an empty private tmpfs, mounted after the binds (e.g.
   * Deno's `location_data` inside a writable cache: web storage that must
   * not outlive the process).
   *
   * @default {[]}
   */
  scratch?: readonly string[];
  /** Whether any network access is granted: the network namespace is then shared. */
  net: boolean;
  /**
   * The forwarded network of `host:port` grants (from `netBwrapArgs()`):
   * the worker keeps a network namespace of its own (only loopback), with
   * these binds (the broker's hosts file, nsswitch file and socket) and the
   * files of {@linkcode FORWARDED_NETWORK_PATHS}. Overrides `net`.
   *
   * @default {undefined}
   */
  netArgs?: readonly string[];
  /**
   * Whether the confine step needs capabilities in the network namespace
   * (`netStepCapabilities()`: a port below 1024, an address to add to
   * loopback): bubblewrap then does not nest a user namespace
   * (`--disable-userns`), which would hold them away from the network
   * namespace; the seccomp filter refuses new namespaces instead.
   *
   * @default {false}
   */
  netCapabilities?: boolean;
  /**
   * Granted programs: `true` mounts the system's program directories
   * ({@linkcode PROGRAM_PATHS}); absolute paths are mounted too. Names are
   * resolved by the parent: see `programs`.
   *
   * @default {[]}
   */
  run?: ResolvedScopes;
  /**
   * The files the granted program names resolve to (where each was found
   * on the worker's PATH, its real path, its interpreters), mounted
   * read-only at their paths.
   *
   * @default {[]}
   */
  programs?: readonly string[];
  /**
   * Granted native libraries (absolute paths), mounted read-only. `true`
   * mounts nothing more: the library directories are always there.
   *
   * @default {[]}
   */
  ffi?: ResolvedScopes;
  /**
   * The worker's whole environment. bubblewrap passes its own on: spawn it
   * with `bwrapEnvironment()` of this; those that act at start are set
   * inside by the argv.
   */
  env: Readonly<Record<string, string>>;
  /**
   * The worker's working directory (absolute). When no mount covers it, an
   * empty directory is made at its path so that relative paths to mounted
   * paths keep working.
   */
  cwd: string;
  /**
   * How the parent resolved the `read`, `write` and `ffi` grants: each is
   * bound from its real path (`sources`), and those a worker may have made
   * or swapped (`throughFd`) from a descriptor opened without following
   * links (`--ro-bind-fd`, `--bind-fd`; the argv then holds
   * {@linkcode BIND_FD_PLACEHOLDER}`<real path>` where the descriptor's
   * number goes, filled in by the confine step's `--bind-fds` form).
   *
   * @default {each grant bound from its own path}
   */
  grants?: BwrapGrants;
}

/** How the grants are bound: see {@linkcode BwrapOptions} `grants`. */
export interface BwrapGrants {
  /** The real path of each granted path, by granted path. */
  readonly sources: ReadonlyMap<string, string>;
  /** Granted paths to bind through a descriptor. */
  readonly throughFd: ReadonlySet<string>;
}

/**
 * The prefix of the argv slot where a grant's descriptor number goes (see
 * {@linkcode BwrapOptions} `grants`): never a valid descriptor, so a slot
 * left unfilled fails bubblewrap's start.
 */
export const BIND_FD_PLACEHOLDER = "airlock-fd:";

/** Options of {@linkcode sandboxedArgv}. */
export interface SandboxedArgvOptions {
  /** The bubblewrap binary. */
  bwrap: string;
  /** The runtime binary (its real path: symlinks resolved by the lookup). */
  runtimeBinary: string;
  /** The command to run inside. */
  command: readonly string[];
  /** Read-only mounts for the worker's code. */
  readOnly: readonly string[];
  /** Paths the worker's code must write besides its grants (its private code cache). */
  writable: readonly string[];
  /** Paths that get an empty private tmpfs. */
  scratch: readonly string[];
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** The worker's whole environment. */
  env: Readonly<Record<string, string>>;
  /** The worker's working directory. */
  cwd: string;
  /**
   * The descriptor holding a seccomp filter for bubblewrap to install.
   *
   * @default {undefined}
   */
  seccompFd?: string;
  /**
   * A program made from a descriptor's bytes (see {@linkcode BwrapOptions} `embedded`).
   *
   * @default {undefined}
   */
  embedded?: { fd: string; path: string };
  /**
   * The forwarded network's arguments (see {@linkcode BwrapOptions} `netArgs`).
   *
   * @default {undefined}
   */
  netArgs?: readonly string[];
  /**
   * See {@linkcode BwrapOptions} `netCapabilities`.
   *
   * @default {false}
   */
  netCapabilities?: boolean;
  /**
   * How the grants are bound (see {@linkcode BwrapOptions} `grants`).
   *
   * @default {undefined}
   */
  grants?: BwrapGrants;
  /**
   * The files of the granted program names (see {@linkcode BwrapOptions} `programs`).
   *
   * @default {[]}
   */
  programs?: readonly string[];
  /**
   * The descriptors of the shared user and pid namespaces to join (see
   * {@linkcode BwrapOptions} `joinPidNamespace`).
   *
   * @default {undefined}
   */
  joinPidNamespace?: { userFd: string; pidFd: string };
  /**
   * Whether bubblewrap dies with its parent (see {@linkcode BwrapOptions}).
   *
   * @default {true}
   */
  dieWithParent?: boolean;
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
    runtimeBinary: options.runtimeBinary,
    command: options.command,
    readOnly: options.readOnly,
    read: permissions.read,
    write: permissions.write === true
      ? true
      : [...permissions.write, ...options.writable],
    scratch: options.scratch,
    net: isGranted(permissions.net),
    ...(options.netArgs === undefined ? {} : { netArgs: options.netArgs }),
    ...(options.netCapabilities ? { netCapabilities: true } : {}),
    run: permissions.run,
    ffi: permissions.ffi,
    env: options.env,
    cwd: options.cwd,
    ...(options.seccompFd === undefined
      ? {}
      : { seccompFd: options.seccompFd }),
    ...(options.embedded === undefined ? {} : { embedded: options.embedded }),
    ...(options.grants === undefined ? {} : { grants: options.grants }),
    programs: options.programs ?? [],
    ...(options.joinPidNamespace === undefined
      ? {}
      : { joinPidNamespace: options.joinPidNamespace }),
    ...(options.dieWithParent === undefined
      ? {}
      : { dieWithParent: options.dieWithParent }),
  });
}

/**
 * Builds bubblewrap's command line for a worker. The worker gets new user
 * (with nested user namespaces disabled), pid, IPC, UTS and cgroup namespaces
 * and, unless `net` is granted, a network namespace with only loopback: it
 * can see and signal only its own processes (its pid inside is 2, under
 * bubblewrap's init; the host pid is found by the launch). With
 * `joinPidNamespace`, it joins the user and pid namespaces its parent's
 * workers share instead (distinct pids; Landlock keeps them apart). No
 * capabilities;
 * a new session; killed when its parent dies; an environment of `env` only
 * (bubblewrap adds `PWD`), given through bubblewrap's own environment: spawn
 * it with `bwrapEnvironment(env)`; only those that act at start
 * are on the command line.
 *
 * The file system is a read-only empty root with: the library directories
 * ({@linkcode LIBRARY_PATHS}), the runtime binary, `readOnly` and the read
 * grants read-only; the write grants read-write; a private `/tmp`, a minimal
 * `/dev` and `/proc`; the network files ({@linkcode NETWORK_PATHS}) when
 * `net` is granted; the program directories ({@linkcode PROGRAM_PATHS}) when
 * `run` is `true`, and the files of the granted program names (`programs`)
 * otherwise. Grants are bound from their real paths (`grants`), those a
 * worker may swap from a descriptor. Paths that do not exist are skipped
 * (but a grant bound from a descriptor). A write grant wins over a
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
 * import { bwrapArgv } from "./bwrap.ts";
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
  const { mounts, writable, cwd } = fileSystem(options);
  const shared = options.net && options.netArgs === undefined;
  const argv = [
    options.bwrap,
    ...(options.dieWithParent === false ? [] : ["--die-with-parent"]),
    "--new-session",
    ...(options.joinPidNamespace === undefined
      ? [
        "--unshare-user",
        ...(options.netCapabilities ? [] : ["--disable-userns"]),
        "--unshare-pid",
      ]
      : [
        "--userns",
        options.joinPidNamespace.userFd,
        "--pidns",
        options.joinPidNamespace.pidFd,
        "--assert-userns-disabled",
      ]),
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    ...(shared ? [] : ["--unshare-net"]),
    "--cap-drop",
    "ALL",
  ];
  // The variables reach the worker through bubblewrap's own environment
  // (bwrapEnvironment()): a value on this command line is readable by every
  // process in /proc/<pid>/cmdline. Only those that act at start go here,
  // so that the wrappers (setpriv, the shell, bubblewrap) never act on them.
  for (const [name, value] of Object.entries(options.env)) {
    if (envNameProblem(name) !== undefined) {
      throw new RangeError(
        `Invalid environment variable name for the sandbox: ${
          JSON.stringify(name)
        }`,
      );
    }
    if (isStartupVariable(name)) argv.push("--setenv", name, value);
  }
  for (const mount of mounts) argv.push(...mount.args);
  const embedded = options.embedded;
  if (embedded !== undefined) {
    if (
      !embedded.path.startsWith("/dev/") || embedded.fd === options.seccompFd
    ) {
      throw new RangeError(
        `Cannot embed ${
          JSON.stringify(embedded.path)
        } from descriptor ${embedded.fd}: it must lie in /dev, on a descriptor of its own`,
      );
    }
    argv.push("--perms", "0555", "--ro-bind-data", embedded.fd, embedded.path);
  }
  // Over every other mount (a grant of /etc included), before the root is
  // made read-only (they need their mount points).
  if (options.netArgs !== undefined) argv.push(...options.netArgs);
  if (!writable.includes("/")) argv.push("--remount-ro", "/");
  if (options.seccompFd !== undefined) {
    argv.push("--seccomp", options.seccompFd);
  }
  argv.push("--chdir", cwd, "--", ...options.command);
  return argv;
}

/**
 * The worker's file system as bubblewrap mounts, outermost first: the
 * read-only paths (libraries, network files, programs, the runtime, the
 * code, the read grants) but those under a write grant, the write grants,
 * `/dev`, `/proc`, a private `/tmp`, the scratch tmpfs and the cwd
 * (normalized, returned).
 */
function fileSystem(
  options: BwrapOptions,
): { mounts: Mount[]; writable: string[]; cwd: string } {
  const read = scopesToPaths(options.read, "read");
  const write = scopesToPaths(options.write, "write");
  const run = options.run ?? [];
  const ffi = options.ffi ?? [];
  const cwd = normalizePath(options.cwd, "cwd");

  const forwarded = options.netArgs !== undefined;
  const shared = options.net && !forwarded;
  const readOnly: string[] = [
    ...LIBRARY_PATHS,
    ...(forwarded ? FORWARDED_NETWORK_PATHS : shared ? NETWORK_PATHS : []),
    ...(run === true ? PROGRAM_PATHS : []),
    ...(options.programs ?? []).map((path, index) =>
      normalizePath(path, `programs[${index}]`)
    ),
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

  const grants = options.grants;
  const bind = (path: string, writable: boolean): string[] => {
    const source = grants?.sources.get(path) ?? path;
    if (grants?.throughFd.has(path)) {
      return [
        writable ? "--bind-fd" : "--ro-bind-fd",
        `${BIND_FD_PLACEHOLDER}${source}`,
        path,
      ];
    }
    return [writable ? "--bind-try" : "--ro-bind-try", source, path];
  };
  const mounts: Mount[] = [
    ...readable.map((path): Mount => ({
      path,
      args: bind(path, false),
      rank: 0,
    })),
    ...writable.map((path): Mount => ({
      path,
      args: bind(path, true),
      rank: 0,
    })),
    { path: "/dev", args: ["--dev", "/dev"], rank: 1 },
    { path: "/proc", args: ["--proc", "/proc"], rank: 1 },
  ];
  if (!bound.some((path) => covers(path, "/tmp"))) {
    mounts.push({ path: "/tmp", args: ["--tmpfs", "/tmp"], rank: 1 });
  }
  (options.scratch ?? []).forEach((path, index) => {
    const dest = normalizePath(path, `scratch[${index}]`);
    mounts.push({ path: dest, args: ["--tmpfs", dest], rank: 1 });
  });
  const special = ["/dev", "/proc"];
  if (
    !bound.some((path) => covers(path, cwd)) &&
    !special.some((path) => covers(path, cwd)) && cwd !== "/" &&
    cwd !== "/tmp"
  ) {
    mounts.push({ path: cwd, args: ["--dir", cwd], rank: 2 });
  }
  mounts.sort((a, b) => depth(a.path) - depth(b.path) || a.rank - b.rank);
  return { mounts, writable, cwd };
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
 * import { bwrapProbeArgv } from "./bwrap.ts";
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
