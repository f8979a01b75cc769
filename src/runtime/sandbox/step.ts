/**
 * The confine step: the short program (`workers/confine.ts`) a worker is
 * started through when Landlock confines it. Run by the runtime itself (Deno
 * or Bun), it calls libc through the runtime's FFI (`step_libc.ts`) on its
 * main thread: drops every capability (when it has any), sets
 * no-new-privileges, changes to the worker's directory, applies the
 * Landlock ruleset, installs the seccomp filter, and `execve`s the
 * worker's command. A Landlock domain and a
 * seccomp filter bind the calling thread only, and the runtime's other
 * threads stay free; `execve` replaces the whole process with one thread
 * that inherits both, before any code of the worker runs.
 *
 * Any failure ends the step with {@linkcode CONFINE_FAILED_EXIT_CODE} and a
 * line on stderr saying what failed: the worker never runs unconfined.
 *
 * @module
 */

import {
  BIND_FDS_FLAG,
  type BindFdsSpec,
  CONFINE_FAILED_EXIT_CODE,
  CONFINE_HELD_ENV_PREFIX,
  CONFINE_STDERR_PREFIX,
  type ConfineSpec,
  decodeBindFdsSpec,
  decodeConfineSpec,
  LANDLOCK_ACCESS_FILE as ACCESS_FILE,
} from "./spec.ts";
import { loopbackAddressRequest, NLMSG_ERROR } from "./net/loopback_request.ts";
import {
  bunLibc,
  cString,
  cStringBytes,
  type DenoFfi,
  denoLibc,
  encoder,
  type Libc,
  O_CLOEXEC,
  pointerArray,
  StepError,
} from "./step_libc.ts";

const SYS_LANDLOCK_CREATE_RULESET = 444;
const SYS_LANDLOCK_ADD_RULE = 445;
const SYS_LANDLOCK_RESTRICT_SELF = 446;
const SYS_OPENAT2 = 437;
const AT_FDCWD = -100;
const RESOLVE_NO_SYMLINKS = 0x04;
const LANDLOCK_CREATE_RULESET_VERSION = 1;
const LANDLOCK_RULE_PATH_BENEATH = 1;
const LANDLOCK_RULE_NET_PORT = 2;
const PR_SET_NO_NEW_PRIVS = 38;
const PR_SET_SECCOMP = 22;
const PR_GET_SECCOMP = 21;
const PR_CAPBSET_READ = 23;
const PR_CAPBSET_DROP = 24;
const PR_CAP_AMBIENT = 47;
const PR_CAP_AMBIENT_CLEAR_ALL = 4;
const SECCOMP_MODE_FILTER = 2;
const O_PATH = 0x200000;
const ENOENT = 2;
const ENOTDIR = 20;
const ELOOP = 40;
const EINVAL = 22;
const ENOSYS = 38;
const EOPNOTSUPP = 95;
const LINUX_CAPABILITY_VERSION_3 = 0x20080522;
const LAST_CAPABILITY = 63;
const CAP_SETPCAP = 8;

/**
 * Splits `/proc/self/environ` into its NUL-terminated entries and makes the
 * worker's environment of them: a held variable
 * (`AIRLOCK_CONFINE_HELD_<NAME>`) gets its name back and wins over an entry
 * of the same name; then the spec's changes apply to the step's own
 * entries (a value replaces, `null` removes).
 */
function environEntries(
  block: Uint8Array,
  changes: Readonly<Record<string, string | null>>,
): Uint8Array[] {
  const held = encoder.encode(CONFINE_HELD_ENV_PREFIX);
  const startsWith = (entry: Uint8Array, prefix: Uint8Array): boolean =>
    entry.byteLength >= prefix.byteLength &&
    prefix.every((byte, index) => entry[index] === byte);
  const nameOf = (entry: Uint8Array): Uint8Array => {
    const end = entry.indexOf(61); // "="
    return entry.subarray(0, end < 0 ? entry.byteLength : end + 1);
  };
  const entries: Uint8Array[] = [];
  let start = 0;
  for (let index = 0; index < block.byteLength; index++) {
    if (block[index] === 0) {
      if (index > start) entries.push(block.slice(start, index + 1));
      start = index + 1;
    }
  }
  if (start < block.byteLength) entries.push(cStringBytes(block.slice(start)));
  const restored = entries.filter((entry) => startsWith(entry, held)).map(
    (entry) => entry.slice(held.byteLength),
  );
  const restoredNames = restored.map(nameOf);
  const changed = Object.keys(changes).map((name) =>
    encoder.encode(`${name}=`)
  );
  const own = entries.filter((entry) =>
    !startsWith(entry, held) &&
    !changed.some((prefix) => startsWith(entry, prefix)) &&
    !restoredNames.some((prefix) => startsWith(entry, prefix))
  );
  const kept = [...restored, ...own];
  for (const [name, value] of Object.entries(changes)) {
    const prefix = encoder.encode(`${name}=`);
    if (value !== null && !restoredNames.some((n) => startsWith(n, prefix))) {
      kept.push(cString(`${name}=${value}`));
    }
  }
  return kept;
}

/**
 * The kernel's Landlock ABI version through `libc`: 0 when the kernel has
 * no Landlock or it is disabled.
 */
function landlockAbi(libc: Libc): number {
  const version = libc.syscall(
    SYS_LANDLOCK_CREATE_RULESET,
    0,
    0,
    LANDLOCK_CREATE_RULESET_VERSION,
    0,
  );
  if (version >= 0) return version;
  const errno = libc.errno();
  if (errno === ENOSYS || errno === EOPNOTSUPP) return 0;
  throw new StepError("cannot ask the kernel for its Landlock ABI", errno);
}

function dropCapabilities(libc: Libc): void {
  // Drop the bounding set first (needs CAP_SETPCAP, so that one last), then
  // every set.
  const order = [
    ...Array.from({ length: LAST_CAPABILITY + 1 }, (_, cap) => cap).filter(
      (cap) => cap !== CAP_SETPCAP,
    ),
    CAP_SETPCAP,
  ];
  for (const cap of order) {
    const has = libc.prctl(PR_CAPBSET_READ, cap, 0, 0, 0);
    if (has < 0) continue; // past the last capability this kernel knows
    if (has === 1 && libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) !== 0) {
      throw new StepError(
        `cannot drop capability ${cap} from the bounding set`,
        libc.errno(),
      );
    }
  }
  clearCapabilities(libc);
}

/**
 * Clears the ambient, inheritable, permitted and effective sets (a process
 * not run by root gains nothing from the bounding set at exec, and
 * no-new-privileges ignores file capabilities).
 */
function clearCapabilities(libc: Libc): void {
  libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  const header = new Uint8Array(8);
  new DataView(header.buffer).setUint32(0, LINUX_CAPABILITY_VERSION_3, true);
  const data = new Uint8Array(24);
  if (libc.capset(libc.address(header), libc.address(data)) !== 0) {
    throw new StepError("cannot clear the capability sets", libc.errno());
  }
}

/**
 * Opens `path` as an `O_PATH` descriptor without following any link on the
 * way (`openat2` with `RESOLVE_NO_SYMLINKS`): what a grant's path is opened
 * with, so that what the parent checked is what gets bound.
 *
 * @returns The descriptor, or `-errno` for a path that is missing.
 * @throws {StepError} for a link on the way, or any other failure.
 */
function openNoLinks(libc: Libc, path: string, cloexec: boolean): number {
  const name = cString(path);
  const how = new Uint8Array(24);
  const view = new DataView(how.buffer);
  view.setBigUint64(0, BigInt(O_PATH | (cloexec ? O_CLOEXEC : 0)), true);
  view.setBigUint64(16, BigInt(RESOLVE_NO_SYMLINKS), true);
  const fd = libc.syscall(
    SYS_OPENAT2,
    BigInt.asUintN(64, BigInt(AT_FDCWD)),
    libc.address(name),
    libc.address(how),
    how.byteLength,
  );
  if (fd >= 0) return fd;
  const errno = libc.errno();
  if (errno === ENOENT || errno === ENOTDIR) return -errno;
  if (errno === ELOOP) {
    throw new StepError(
      `the grant ${
        JSON.stringify(path)
      } is a link or lies under one now, which it was not when the parent checked it (a worker may have swapped it); grant its real path`,
      errno,
    );
  }
  if (errno === ENOSYS) {
    throw new StepError(
      `cannot open the grant ${
        JSON.stringify(path)
      } without following links: the kernel has no openat2 (Linux 5.6 or later)`,
      errno,
    );
  }
  throw new StepError(`cannot open the grant ${JSON.stringify(path)}`, errno);
}

function applyLandlock(
  libc: Libc,
  ruleset: NonNullable<ConfineSpec["landlock"]>,
): void {
  const abi = landlockAbi(libc);
  if (abi < ruleset.abi) {
    throw new StepError(
      `the kernel's Landlock ABI is ${abi}, the ruleset needs ${ruleset.abi}`,
      0,
    );
  }
  const size = ruleset.abi >= 6 ? 24 : ruleset.abi >= 4 ? 16 : 8;
  const attr = new Uint8Array(24);
  const attrView = new DataView(attr.buffer);
  attrView.setBigUint64(0, BigInt(ruleset.handledFs), true);
  attrView.setBigUint64(8, BigInt(ruleset.handledNet), true);
  attrView.setBigUint64(16, BigInt(ruleset.scoped), true);
  const fd = libc.syscall(
    SYS_LANDLOCK_CREATE_RULESET,
    libc.address(attr),
    size,
    0,
    0,
  );
  if (fd < 0) {
    throw new StepError("cannot create the Landlock ruleset", libc.errno());
  }
  const rule = new Uint8Array(16);
  const ruleView = new DataView(rule.buffer);
  const ruleAddress = libc.address(rule);
  for (const { path, access, exact, required } of ruleset.paths) {
    if (access === 0) continue;
    let pathFd: number;
    if (exact === true) {
      pathFd = openNoLinks(libc, path, true);
      if (pathFd < 0) {
        if (required !== true) continue;
        throw new StepError(
          `the grant ${
            JSON.stringify(path)
          } is gone, which it was not when the parent checked it (a worker may have moved it)`,
          -pathFd,
        );
      }
    } else {
      const name = cString(path);
      pathFd = libc.open(libc.address(name), O_PATH | O_CLOEXEC, 0);
      if (pathFd < 0) {
        const errno = libc.errno();
        if (errno === ENOENT || errno === ENOTDIR) continue;
        throw new StepError(`cannot open ${JSON.stringify(path)}`, errno);
      }
    }
    let allowed = access;
    for (;;) {
      ruleView.setBigUint64(0, BigInt(allowed), true);
      ruleView.setInt32(8, pathFd, true);
      const added = libc.syscall(
        SYS_LANDLOCK_ADD_RULE,
        fd,
        LANDLOCK_RULE_PATH_BENEATH,
        ruleAddress,
        0,
      );
      if (added === 0) break;
      const errno = libc.errno();
      // A file (not a directory) takes only the rights that apply to files.
      if (errno === EINVAL && (allowed & ~ACCESS_FILE) !== 0) {
        allowed &= ACCESS_FILE;
        if (allowed !== 0) continue;
        break;
      }
      libc.close(pathFd);
      throw new StepError(
        `cannot add the Landlock rule for ${JSON.stringify(path)}`,
        errno,
      );
    }
    libc.close(pathFd);
  }
  for (const { port, access } of ruleset.ports) {
    ruleView.setBigUint64(0, BigInt(access), true);
    ruleView.setBigUint64(8, BigInt(port), true);
    if (
      libc.syscall(
        SYS_LANDLOCK_ADD_RULE,
        fd,
        LANDLOCK_RULE_NET_PORT,
        ruleAddress,
        0,
      ) !== 0
    ) {
      throw new StepError(
        `cannot add the Landlock rule for TCP port ${port}`,
        libc.errno(),
      );
    }
  }
  if (libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0, 0) !== 0) {
    throw new StepError("cannot apply the Landlock ruleset", libc.errno());
  }
  libc.close(fd);
}

function installSeccomp(libc: Libc, program: Uint8Array): void {
  if (program.byteLength === 0 || program.byteLength % 8 !== 0) {
    throw new StepError("the seccomp program is empty or truncated", 0);
  }
  const fprog = new Uint8Array(16);
  const view = new DataView(fprog.buffer);
  view.setUint16(0, program.byteLength / 8, true);
  view.setBigUint64(8, BigInt(libc.address(program)), true);
  if (
    libc.prctl(
      PR_SET_SECCOMP,
      SECCOMP_MODE_FILTER,
      libc.address(fprog),
      0,
      0,
    ) !==
      0
  ) {
    throw new StepError("cannot install the seccomp filter", libc.errno());
  }
}

function decodeBase64(text: string): Uint8Array {
  const binary = atob(text);
  const bytes = new Uint8Array(binary.length);
  for (let index = 0; index < binary.length; index++) {
    bytes[index] = binary.charCodeAt(index);
  }
  return bytes;
}

/**
 * Starts the network forwarder (a process of its own, beside the worker:
 * see src/runtime/sandbox/net/forwarder.ts) with its own environment and
 * no stdin or stdout (the worker's pipes), its stderr the worker's.
 */
function startForwarder(
  forwarder: NonNullable<ConfineSpec["forwarder"]>,
): void {
  const [program = "", ...args] = forwarder.argv;
  const env = { ...forwarder.env };
  const runtime = globalThis as unknown as {
    Bun?: {
      spawn(argv: string[], options: Record<string, unknown>): unknown;
    };
    Deno?: {
      Command: new (
        program: string,
        options: Record<string, unknown>,
      ) => { spawn(): unknown };
    };
  };
  try {
    if (runtime.Bun !== undefined) {
      runtime.Bun.spawn([program, ...args], {
        env,
        stdin: "ignore",
        stdout: "ignore",
        stderr: "inherit",
      });
    } else if (runtime.Deno !== undefined) {
      new runtime.Deno.Command(program, {
        args,
        env,
        clearEnv: true,
        stdin: "null",
        stdout: "null",
        stderr: "inherit",
      }).spawn();
    } else throw new Error("no runtime to spawn it with");
  } catch (error: unknown) {
    throw new StepError(
      `cannot start the network forwarder: ${
        error instanceof Error ? error.message : String(error)
      }`,
      0,
    );
  }
}

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0x80000;
const EEXIST = 17;

/**
 * Adds each granted address outside loopback to the sandbox's loopback
 * interface (the forwarder listens there next; the native step does the
 * same in C). Needs `CAP_NET_ADMIN` in the sandbox's user namespace,
 * which bubblewrap gives this step for it; an address already there (two
 * ports of one host) is fine.
 */
function addLoopbackAddresses(libc: Libc, addresses: readonly string[]): void {
  for (const item of addresses) {
    const hex = item.slice(2);
    const address = new Uint8Array(hex.length / 2);
    for (let index = 0; index < address.byteLength; index++) {
      address[index] = parseInt(hex.slice(index * 2, index * 2 + 2), 16);
    }
    const request = loopbackAddressRequest(address);
    const fd = libc.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      throw new StepError(
        `cannot open a routing socket to add ${item}`,
        libc.errno(),
      );
    }
    const answer = new Uint8Array(256);
    const sent = libc.write(fd, libc.address(request), request.byteLength);
    const got = sent === request.byteLength
      ? libc.read(fd, libc.address(answer), answer.byteLength)
      : -1;
    const errno = libc.errno();
    libc.close(fd);
    const view = new DataView(answer.buffer);
    if (got < 20 || view.getUint16(4, true) !== NLMSG_ERROR) {
      throw new StepError(`no answer from the kernel to adding ${item}`, errno);
    }
    const error = -view.getInt32(16, true);
    if (error !== 0 && error !== EEXIST) {
      throw new StepError(
        `cannot add the granted address ${item} to the sandbox's loopback`,
        error,
      );
    }
  }
}

/** Confines this process as the spec says, then replaces it with the worker. */
function confineAndExec(libc: Libc, spec: ConfineSpec): never {
  const dir = cString(spec.cwd);
  if (libc.chdir(libc.address(dir)) !== 0) {
    throw new StepError(
      `cannot change to the directory ${JSON.stringify(spec.cwd)}`,
      libc.errno(),
    );
  }
  // Before the capabilities go: the forwarder may need to listen on a port
  // below 1024, or on an address to add first (bubblewrap then adds
  // CAP_NET_BIND_SERVICE or CAP_NET_ADMIN for this step).
  if (spec.forwarder !== undefined) {
    addLoopbackAddresses(libc, spec.forwarder.localAddresses ?? []);
    startForwarder(spec.forwarder);
  }
  if (libc.geteuid() === 0) dropCapabilities(libc);
  else clearCapabilities(libc);
  if (libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) !== 0) {
    throw new StepError("cannot set no-new-privileges", libc.errno());
  }
  if (spec.landlock !== null) applyLandlock(libc, spec.landlock);
  // Built before the filter: nothing allocates through a refused call after it.
  const argv = pointerArray(libc, spec.argv.map(cString));
  const envp = pointerArray(
    libc,
    environEntries(libc.readFile("/proc/self/environ"), spec.env),
  );
  const file = cString(spec.argv[0] ?? "");
  const program = spec.seccomp === "" ? undefined : decodeBase64(spec.seccomp);
  if (program !== undefined) installSeccomp(libc, program);
  libc.execvpe(
    libc.address(file),
    libc.address(argv.array),
    libc.address(envp.array),
  );
  const errno = libc.errno();
  // Keep the buffers alive until execvpe has returned.
  void argv.keep;
  void envp.keep;
  throw new StepError(
    `cannot execute ${JSON.stringify(spec.argv[0])}`,
    errno,
  );
}

/**
 * The `--bind-fds` form: opens each grant without following links (the
 * descriptors stay open across `execve`), writes their numbers into the
 * argv and execs it (bubblewrap, which binds them and closes them). Runs on
 * the host, before bubblewrap; confines nothing itself.
 */
function bindFdsAndExec(libc: Libc, spec: BindFdsSpec): never {
  const argv = [...spec.argv];
  for (const { path, arg } of spec.fds) {
    const fd = openNoLinks(libc, path, false);
    if (fd < 0) {
      throw new StepError(
        `the grant ${
          JSON.stringify(path)
        } is gone, which it was not when the parent checked it (a worker may have moved it)`,
        -fd,
      );
    }
    argv[arg] = String(fd);
  }
  const args = pointerArray(libc, argv.map(cString));
  const envp = pointerArray(
    libc,
    environEntries(libc.readFile("/proc/self/environ"), spec.env),
  );
  const file = cString(argv[0] ?? "");
  libc.execvpe(
    libc.address(file),
    libc.address(args.array),
    libc.address(envp.array),
  );
  const errno = libc.errno();
  void args.keep;
  void envp.keep;
  throw new StepError(`cannot execute ${JSON.stringify(argv[0])}`, errno);
}

/** What `--probe` prints: what this kernel offers the step. */
export interface ConfineProbe {
  /** The Landlock ABI version (0: none). */
  landlockAbi: number;
  /** Whether seccomp filters can be installed (`PR_GET_SECCOMP` answers). */
  seccomp: boolean;
}

function probe(libc: Libc): ConfineProbe {
  const mode = libc.prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
  return { landlockAbi: landlockAbi(libc), seccomp: mode >= 0 };
}

interface BunProcess {
  argv: string[];
  exit(code: number): never;
}

/**
 * Runs the confine step: with `--probe`, prints a {@linkcode ConfineProbe}
 * as JSON and exits; otherwise confines itself by the spec in its first
 * argument and execs the worker. Never returns.
 *
 * @param args The step's arguments (default: the process's own).
 * @returns Never: the process is replaced or exits.
 */
export async function runConfineStep(args?: readonly string[]): Promise<never> {
  const bun = (globalThis as { Bun?: unknown }).Bun !== undefined;
  const deno = bun
    ? undefined
    : (globalThis as unknown as { Deno?: DenoFfi }).Deno;
  const bunProcess = (globalThis as unknown as { process: BunProcess })
    .process;
  const argv = args ?? (deno ? deno.args : bunProcess.argv.slice(2));
  let writeSync: (fd: number, bytes: Uint8Array) => void;
  if (deno) {
    writeSync = (fd, bytes) =>
      void (fd === 1 ? deno.stdout : deno.stderr).writeSync(bytes);
  } else {
    // Loaded only to report (a failure, a probe): node:fs costs a Bun
    // confine step about 3.5 ms of CPU, every start.
    const fs = () =>
      (globalThis as unknown as {
        process: {
          getBuiltinModule(id: "node:fs"): {
            writeSync(fd: number, bytes: Uint8Array): number;
          };
        };
      }).process.getBuiltinModule("node:fs");
    writeSync = (fd, bytes) => void fs().writeSync(fd, bytes);
  }
  const exit = (code: number): never =>
    deno ? deno.exit(code) : bunProcess.exit(code);
  const fail = (error: unknown): never => {
    const message = error instanceof Error ? error.message : String(error);
    writeSync(2, encoder.encode(`${CONFINE_STDERR_PREFIX} ${message}\n`));
    return exit(CONFINE_FAILED_EXIT_CODE);
  };
  let libc: Libc;
  try {
    libc = deno ? denoLibc(deno) : await bunLibc();
  } catch (error: unknown) {
    return fail(error);
  }
  if (argv[0] === "--probe") {
    try {
      writeSync(1, encoder.encode(`${JSON.stringify(probe(libc))}\n`));
    } catch (error: unknown) {
      return fail(error);
    }
    return exit(0);
  }
  if (argv[0] === BIND_FDS_FLAG) {
    try {
      return bindFdsAndExec(libc, decodeBindFdsSpec(argv[1] ?? ""));
    } catch (error: unknown) {
      return fail(error);
    }
  }
  try {
    return confineAndExec(libc, decodeConfineSpec(argv[0] ?? ""));
  } catch (error: unknown) {
    return fail(error);
  }
}
