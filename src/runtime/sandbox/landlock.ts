/**
 * The Landlock ruleset of a worker, built from its permissions: which
 * accesses the kernel is told to handle (everything the ABI knows), and which
 * paths and TCP ports are allowed which of them. Pure data, no I/O: the
 * confine step (`step.ts`) opens the paths and applies it.
 *
 * What a worker gets besides its grants: read on the system's library
 * directories, read and execute on the programs it runs (the runtime
 * binary, or a command's interpreter and its installation, the programs its
 * `run` names resolve to) and their interpreters, read on its code (the
 * module's project, airlock's own code, package directories), read on its
 * own `/proc/<pid>` and on a few system files runtimes read at start (CPU and
 * memory information, cgroup limits), read and write on `/dev/null`,
 * `/dev/zero` and `/dev/full`, read on `/dev/urandom` and `/dev/random`.
 *
 * See docs/permissions.md for what Landlock covers and what it does not.
 *
 * @module
 */

import { isAbsolute } from "../node_builtins.ts";
import { LANDLOCK_ACCESS_FILE } from "./spec.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import { isGranted } from "../permissions.ts";
import { LIBRARY_PATHS, NETWORK_PATHS, PROGRAM_PATHS } from "./bwrap.ts";
import { normalizePath } from "./paths.ts";

/** Landlock's file-system access rights (`LANDLOCK_ACCESS_FS_*`), with the ABI that introduced each. */
export const LANDLOCK_ACCESS_FS = {
  EXECUTE: 1 << 0,
  WRITE_FILE: 1 << 1,
  READ_FILE: 1 << 2,
  READ_DIR: 1 << 3,
  REMOVE_DIR: 1 << 4,
  REMOVE_FILE: 1 << 5,
  MAKE_CHAR: 1 << 6,
  MAKE_DIR: 1 << 7,
  MAKE_REG: 1 << 8,
  MAKE_SOCK: 1 << 9,
  MAKE_FIFO: 1 << 10,
  MAKE_BLOCK: 1 << 11,
  MAKE_SYM: 1 << 12,
  /** ABI 2: link or rename a file into another directory. */
  REFER: 1 << 13,
  /** ABI 3: truncate a file. */
  TRUNCATE: 1 << 14,
  /** ABI 5: ioctl on a device file. */
  IOCTL_DEV: 1 << 15,
} as const;

/** Landlock's network access rights (`LANDLOCK_ACCESS_NET_*`, ABI 4). */
export const LANDLOCK_ACCESS_NET = {
  BIND_TCP: 1 << 0,
  CONNECT_TCP: 1 << 1,
} as const;

/** Landlock's scopes (`LANDLOCK_SCOPE_*`, ABI 6). */
export const LANDLOCK_SCOPE = {
  /** Connecting to an abstract unix socket made outside the domain. */
  ABSTRACT_UNIX_SOCKET: 1 << 0,
  /** Signalling a process outside the domain. */
  SIGNAL: 1 << 1,
} as const;

/** The file-system rights each ABI handles. */
function handledFs(abi: number): number {
  if (abi < 1) return 0;
  let bits = (1 << 13) - 1; // EXECUTE .. MAKE_SYM
  if (abi >= 2) bits |= LANDLOCK_ACCESS_FS.REFER;
  if (abi >= 3) bits |= LANDLOCK_ACCESS_FS.TRUNCATE;
  if (abi >= 5) bits |= LANDLOCK_ACCESS_FS.IOCTL_DEV;
  return bits;
}

const F = LANDLOCK_ACCESS_FS;

/** Reading files and listing directories. */
export const ACCESS_READ: number = F.READ_FILE | F.READ_DIR;
/** Reading and executing. */
export const ACCESS_READ_EXECUTE: number = ACCESS_READ | F.EXECUTE;
/**
 * Everything a write grant allows: reading, writing, truncating, creating
 * and removing files, directories, links, sockets and fifos, moving files
 * between granted directories. Never device nodes.
 */
export const ACCESS_READ_WRITE: number = ACCESS_READ | F.WRITE_FILE |
  F.REMOVE_DIR | F.REMOVE_FILE | F.MAKE_DIR | F.MAKE_REG | F.MAKE_SOCK |
  F.MAKE_FIFO | F.MAKE_SYM | F.REFER | F.TRUNCATE;

/** The rights that apply to a file (not a directory): a rule on a file keeps only these. */
export const ACCESS_FILE: number = LANDLOCK_ACCESS_FILE;

/**
 * System files every runtime reads at start, read-only: its own `/proc`
 * directory (`/proc/self`, resolved when the step opens it: the worker keeps
 * the step's pid across `execve`), CPU, memory and kernel settings, cgroup
 * limits.
 */
export const SYSTEM_READ_PATHS: readonly string[] = [
  "/proc/self",
  "/proc/cpuinfo",
  "/proc/meminfo",
  "/proc/stat",
  "/proc/loadavg",
  "/proc/uptime",
  "/proc/version",
  "/proc/filesystems",
  "/proc/sys",
  "/sys/devices/system/cpu",
  "/sys/fs/cgroup",
  "/dev/urandom",
  "/dev/random",
];

/** Device files a worker may read and write. */
export const SYSTEM_READ_WRITE_PATHS: readonly string[] = [
  "/dev/null",
  "/dev/zero",
  "/dev/full",
];

/** One path rule: the access allowed beneath `path`. */
export interface LandlockPathRule {
  /** An absolute path (`/proc/self` is resolved by the step). */
  readonly path: string;
  /** `LANDLOCK_ACCESS_FS_*` bits. */
  readonly access: number;
  /**
   * A grant: the step opens the path without following any link (`openat2`
   * with `RESOLVE_NO_SYMLINKS`), and a link on the way is an error, so the
   * rule is on what the parent checked, never on where a link a worker
   * swapped in leads.
   */
  readonly exact?: boolean;
  /** A grant that must exist: missing is an error, not a skip. */
  readonly required?: boolean;
}

/**
 * How the grants' paths were resolved by the parent, once, before the
 * start (see `resolveGrantPaths` in grant_links.ts).
 */
export interface GrantPaths {
  /** The path each granted path is opened at, by granted path (its real path under Landlock alone). */
  readonly at: ReadonlyMap<string, string>;
  /** Granted paths a worker may have made or swapped: they must exist. */
  readonly required: ReadonlySet<string>;
}

/** One TCP port rule. */
export interface LandlockPortRule {
  /** The TCP port. */
  readonly port: number;
  /** `LANDLOCK_ACCESS_NET_*` bits. */
  readonly access: number;
}

/** A Landlock ruleset, as data. */
export interface LandlockRuleset {
  /** The ABI it was built for. */
  readonly abi: number;
  /** `handled_access_fs`: the file-system rights denied unless a rule allows them. */
  readonly handledFs: number;
  /** `handled_access_net`: the TCP rights denied unless a rule allows them (0: TCP not restricted). */
  readonly handledNet: number;
  /** `scoped`: the IPC the domain is closed to. */
  readonly scoped: number;
  /** Path rules. Paths that do not exist when the step runs are skipped. */
  readonly paths: readonly LandlockPathRule[];
  /** TCP port rules. */
  readonly ports: readonly LandlockPortRule[];
}

/** Options of {@linkcode landlockRuleset}. */
export interface LandlockRulesetOptions {
  /** The kernel's Landlock ABI version (from `probeConfineSupport()`). */
  abi: number;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /**
   * Programs and installations the worker runs from, readable and
   * executable: the runtime binary (real path), or a command's interpreter
   * and its prefix directory, the programs its `run` names resolve to, and
   * the interpreters (`ld.so`, a script's `#!`) of each.
   */
  executables: readonly string[];
  /**
   * The worker's code, read-only: its project, airlock's code, package
   * directories, config files, Deno's module caches.
   */
  readOnly: readonly string[];
  /**
   * How the parent resolved the grants (`read`, `write`, `ffi` paths): each
   * grant's rule is exact (no link followed) at the path given here.
   *
   * @default {each grant at its own path, exact, not required}
   */
  grants?: GrantPaths;
  /**
   * Directories the worker may list, not read files in (Landlock's
   * `READ_DIR`, which covers the directories beneath too): airlock's root
   * for a Bun worker, whose resolver lists the directory of a file it
   * imports.
   *
   * @default {[]}
   */
  listOnly?: readonly string[];
}

/** A feature of Landlock a worker's grants need and the kernel lacks. */
export interface LandlockGap {
  /** What is missing, in words. */
  readonly feature: string;
  /** The ABI version that has it. */
  readonly abi: number;
}

/**
 * Builds the Landlock ruleset of a worker. Every access the ABI knows is
 * handled, so only the rules open anything. Network: without `net`, every
 * TCP bind and connect is refused; with `net` scopes that all name a port,
 * only those ports (on any host: Landlock does not see addresses); with a
 * scope without a port, or `net: true`, TCP is not restricted. Scopes: the
 * worker cannot signal a process outside its domain, nor connect to an
 * abstract unix socket unless `net` is `true`.
 *
 * @param options The ABI, the permissions, the programs and the code.
 * @returns The ruleset.
 * @throws {RangeError} when a path is relative.
 *
 * @example A worker granted one directory
 * ```ts
 * import {
 *   ACCESS_READ_WRITE,
 *   landlockRuleset,
 *   LANDLOCK_SCOPE,
 * } from "./landlock.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const ruleset = landlockRuleset({
 *   abi: 6,
 *   permissions: resolvePermissions({ read: ["./data"], write: ["./data"] }, "/app"),
 *   executables: ["/usr/bin/deno"],
 *   readOnly: ["/app"],
 * });
 * assert.ok(ruleset.paths.some((r) => r.path === "/app/data" && r.access === ACCESS_READ_WRITE));
 * assert.equal(ruleset.ports.length, 0);
 * assert.equal(ruleset.scoped & LANDLOCK_SCOPE.SIGNAL, LANDLOCK_SCOPE.SIGNAL);
 * ```
 */
export function landlockRuleset(
  options: LandlockRulesetOptions,
): LandlockRuleset {
  const { abi, permissions } = options;
  const fs = handledFs(abi);
  const paths: LandlockPathRule[] = [];
  const add = (path: string, access: number, name: string): void => {
    paths.push({ path: normalizePath(path, name), access: access & fs });
  };
  const grant = (path: string, access: number, name: string): void => {
    const normal = normalizePath(path, name);
    paths.push({
      path: options.grants?.at.get(normal) ?? normal,
      access: access & fs,
      exact: true,
      ...(options.grants?.required.has(normal) ? { required: true } : {}),
    });
  };

  // Read, not execute: execute is only on the programs below (the runtime,
  // a command's program, the granted programs) and their interpreters.
  for (const path of LIBRARY_PATHS) add(path, ACCESS_READ, "library");
  options.executables.forEach((path, index) =>
    add(path, ACCESS_READ_EXECUTE, `executables[${index}]`)
  );
  options.readOnly.forEach((path, index) =>
    add(path, ACCESS_READ, `readOnly[${index}]`)
  );
  (options.listOnly ?? []).forEach((path, index) =>
    add(path, F.READ_DIR, `listOnly[${index}]`)
  );
  for (const path of SYSTEM_READ_PATHS) add(path, ACCESS_READ, "system");
  for (const path of SYSTEM_READ_WRITE_PATHS) {
    add(path, F.READ_FILE | F.WRITE_FILE, "system");
  }
  if (isGranted(permissions.net)) {
    for (const path of NETWORK_PATHS) add(path, ACCESS_READ, "network");
  }
  // Granted program names are resolved by the parent (their files are in
  // `executables`); `run: true` opens every program directory.
  const run = permissions.run;
  if (run === true) {
    for (const path of PROGRAM_PATHS) add(path, ACCESS_READ_EXECUTE, "run");
  } else {
    run.filter((entry) => isAbsolute(entry)).forEach((path, index) =>
      add(path, ACCESS_READ_EXECUTE, `run[${index}]`)
    );
  }
  const ffi = permissions.ffi;
  if (ffi !== true) {
    ffi.forEach((path, index) =>
      grant(path, ACCESS_READ_EXECUTE, `ffi[${index}]`)
    );
  }
  const read = permissions.read;
  if (read === true) add("/", ACCESS_READ, "read");
  else {
    read.forEach((path, index) => grant(path, ACCESS_READ, `read[${index}]`));
  }
  const write = permissions.write;
  if (write === true) add("/", ACCESS_READ_WRITE, "write");
  else {
    write.forEach((path, index) =>
      grant(path, ACCESS_READ_WRITE, `write[${index}]`)
    );
  }

  const net = permissions.net;
  let handledNet = 0;
  const ports: LandlockPortRule[] = [];
  if (abi >= 4 && net !== true) {
    const wanted = net.map(portOf);
    if (wanted.every((port) => port !== undefined)) {
      handledNet = LANDLOCK_ACCESS_NET.BIND_TCP |
        LANDLOCK_ACCESS_NET.CONNECT_TCP;
      for (const port of new Set(wanted as number[])) {
        ports.push({ port, access: handledNet });
      }
    }
  }

  let scoped = 0;
  if (abi >= 6) {
    scoped = LANDLOCK_SCOPE.SIGNAL;
    if (net !== true) scoped |= LANDLOCK_SCOPE.ABSTRACT_UNIX_SOCKET;
  }
  return { abi, handledFs: fs, handledNet, scoped, paths, ports };
}

/**
 * What a worker's grants need of Landlock that the kernel's ABI lacks, when
 * Landlock is the only backend confining it. Any gap means Landlock alone
 * cannot enforce the grants: the worker must not start that way.
 *
 * - ABI 0: no Landlock at all.
 * - Below 3: truncating files outside the grants is not restricted.
 * - Below 4, with `net` scopes: TCP ports cannot be restricted (without
 *   `net`, the seccomp filter refuses every socket instead).
 * - Below 6: the worker could signal processes outside its domain.
 *
 * @param permissions The worker's resolved permissions.
 * @param abi The kernel's Landlock ABI version.
 * @returns The gaps, empty when Landlock can enforce everything.
 *
 * @example
 * ```ts
 * import { landlockGaps } from "./landlock.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const gaps = landlockGaps(resolvePermissions({ net: ["db:5432"] }, "/"), 3);
 * assert.deepEqual(gaps.map((gap) => gap.abi), [4, 6]);
 * ```
 */
export function landlockGaps(
  permissions: ResolvedPermissions,
  abi: number,
): LandlockGap[] {
  if (abi < 1) {
    return [{ feature: "Landlock (not enabled in this kernel)", abi: 1 }];
  }
  const gaps: LandlockGap[] = [];
  if (abi < 3) gaps.push({ feature: "truncate rules", abi: 3 });
  const net = permissions.net;
  if (abi < 4 && net !== true && net.length > 0) {
    gaps.push({ feature: "TCP port rules (net scopes)", abi: 4 });
  }
  if (abi < 6) gaps.push({ feature: "signal scoping", abi: 6 });
  return gaps;
}

/**
 * The TCP port of a `net` scope: `"host:443"`, `"1.2.3.4:80"`,
 * `"[::1]:8080"`; `undefined` for a scope without a port (`"host"`, `"::1"`).
 *
 * @param scope A `net` scope.
 * @returns The port, or `undefined`.
 *
 * @example
 * ```ts
 * import { portOf } from "./landlock.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(portOf("localhost:5432"), 5432);
 * assert.equal(portOf("[::1]:80"), 80);
 * assert.equal(portOf("::1"), undefined);
 * assert.equal(portOf("example.com"), undefined);
 * ```
 */
export function portOf(scope: string): number | undefined {
  const match = /^\[[^\]]*\]:(\d{1,5})$/.exec(scope) ??
    /^[^:]*:(\d{1,5})$/.exec(scope);
  if (!match) return undefined;
  const port = Number(match[1]);
  return port <= 65535 ? port : undefined;
}
