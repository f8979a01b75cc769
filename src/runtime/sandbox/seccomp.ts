/**
 * The seccomp filter every confined worker runs under: a classic BPF program
 * (the bytes of a `struct sock_filter` array) that refuses the system calls a
 * worker never needs and an attacker would: debugging other processes
 * (`ptrace`, `process_vm_readv`/`writev`), `io_uring` (whose operations slip
 * past a filter), kernel keyrings, BPF, perf, `userfaultfd`, new namespaces
 * and mounts, module loading, System V IPC and POSIX message queues (the
 * host's, where there is no IPC namespace), and sockets the grants do not
 * name (no socket at all without `net`; with `net` scopes only TCP stream
 * sockets, and no TCP Fast Open, which connects past Landlock's port rules;
 * everything with `net: true`). Where Landlock is the only backend, also
 * the path-based metadata calls (chmod, chown, utimes, setxattr…), which
 * Landlock does not check. Everything else is allowed; a call of another
 * architecture (32-bit `int 0x80`, x32) kills the process.
 *
 * Pure: the same grants give the same bytes. Bubblewrap takes them with
 * `--seccomp FD`; the confine step installs them itself (see `step.ts`).
 *
 * @module
 */

import { process } from "../node_builtins.ts";
import type { ResolvedPermissions } from "../permissions.ts";

/** The architectures the filter knows the system call numbers of. */
export type SeccompArch = "x86_64" | "aarch64";

/** How the filter answers a refused system call. */
export interface SeccompDenial {
  /** The system call's name. */
  readonly name: string;
  /** The errno it fails with. */
  readonly errno: "EPERM" | "ENOSYS";
  /** When it is refused: always, or only for some arguments. */
  readonly when: string;
}

/** `struct seccomp_data` offsets. */
const DATA_NR = 0;
const DATA_ARCH = 4;
/** Argument `n`'s low 32 bits (little-endian on both architectures). */
const dataArg = (n: number): number => 16 + 8 * n;
const DATA_ARG0 = dataArg(0);

/** BPF opcodes. */
const LD_W_ABS = 0x20;
const JEQ_K = 0x15;
const JGE_K = 0x35;
const JSET_K = 0x45;
const AND_K = 0x54;
const RET_K = 0x06;

const RET_ALLOW = 0x7fff0000;
const RET_KILL_PROCESS = 0x80000000;
const RET_ERRNO = 0x00050000;
const EPERM = 1;
const ENOSYS = 38;

const AUDIT_ARCH: Record<SeccompArch, number> = {
  "x86_64": 0xc000003e,
  aarch64: 0xc00000b7,
};

/** x86_64 system calls with this bit set are the x32 ABI. */
const X32_SYSCALL_BIT = 0x40000000;

/** The socket families a `net` scope names: TCP over IPv4 and IPv6. */
const AF_INET = 2;
const AF_INET6 = 10;
/** Routing netlink: what `getifaddrs()` (interface listings) opens. */
const AF_NETLINK = 16;
const NETLINK_ROUTE = 0;
/** `SOCK_STREAM`, and the mask of the type without its flags. */
const SOCK_STREAM = 1;
const SOCK_TYPE_MASK = 0xf;
/** `IPPROTO_TCP`: with 0 (the family's default, TCP), the only protocol allowed. */
const IPPROTO_TCP = 6;
/**
 * `MSG_FASTOPEN`: `sendto`/`sendmsg` with it connects a TCP socket without
 * `connect()`, and Landlock's port rules check only `connect()` and `bind()`.
 */
const MSG_FASTOPEN = 0x20000000;

/**
 * `clone()` flags that make a new namespace (`CLONE_NEWNS`, `NEWCGROUP`,
 * `NEWUTS`, `NEWIPC`, `NEWUSER`, `NEWPID`, `NEWNET`, `NEWTIME`).
 */
const CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 |
  0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080;

/**
 * The system calls refused outright (EPERM), by name, with their numbers on
 * each architecture (`null` where it does not exist).
 */
const ALWAYS_DENIED: ReadonlyArray<
  readonly [name: string, x8664: number | null, aarch64: number | null]
> = [
  ["ptrace", 101, 117],
  ["process_vm_readv", 310, 270],
  ["process_vm_writev", 311, 271],
  ["kcmp", 312, 272],
  ["io_uring_setup", 425, 425],
  ["io_uring_enter", 426, 426],
  ["io_uring_register", 427, 427],
  ["bpf", 321, 280],
  ["perf_event_open", 298, 241],
  ["userfaultfd", 323, 282],
  ["add_key", 248, 217],
  ["request_key", 249, 218],
  ["keyctl", 250, 219],
  ["unshare", 272, 97],
  ["setns", 308, 268],
  ["mount", 165, 40],
  ["umount2", 166, 39],
  ["pivot_root", 155, 41],
  ["chroot", 161, 51],
  ["open_tree", 428, 428],
  ["move_mount", 429, 429],
  ["fsopen", 430, 430],
  ["fsconfig", 431, 431],
  ["fsmount", 432, 432],
  ["fspick", 433, 433],
  ["mount_setattr", 442, 442],
  ["name_to_handle_at", 303, 264],
  ["open_by_handle_at", 304, 265],
  ["init_module", 175, 105],
  ["finit_module", 313, 273],
  ["delete_module", 176, 106],
  ["kexec_load", 246, 104],
  ["kexec_file_load", 320, 294],
  ["acct", 163, 89],
  ["swapon", 167, 224],
  ["swapoff", 168, 225],
  ["reboot", 169, 142],
  ["quotactl", 179, 60],
  ["settimeofday", 164, 170],
  ["clock_settime", 227, 112],
  ["lookup_dcookie", 212, 18],
  // System V IPC and POSIX message queues: without an IPC namespace (Landlock
  // alone) the host user's segments, semaphores and queues are reachable by
  // key or id.
  ["shmget", 29, 194],
  ["shmat", 30, 196],
  ["shmctl", 31, 195],
  ["shmdt", 67, 197],
  ["semget", 64, 190],
  ["semop", 65, 193],
  ["semctl", 66, 191],
  ["semtimedop", 220, 192],
  ["msgget", 68, 186],
  ["msgsnd", 69, 189],
  ["msgrcv", 70, 188],
  ["msgctl", 71, 187],
  ["mq_open", 240, 180],
  ["mq_unlink", 241, 181],
  ["iopl", 172, null],
  ["ioperm", 173, null],
];

const SOCKET: Record<SeccompArch, number> = { "x86_64": 41, aarch64: 198 };
/** The calls that send with flags, and which argument holds them. */
const SEND_FLAGS: ReadonlyArray<
  readonly [name: string, x8664: number, aarch64: number, flagsArg: number]
> = [
  ["sendto", 44, 206, 3],
  ["sendmsg", 46, 211, 2],
  ["sendmmsg", 307, 269, 3],
];

/**
 * The metadata calls that take a path (or, with `AT_EMPTY_PATH`, an
 * `O_PATH` descriptor, which opens without Landlock's checks): refused where
 * Landlock is alone. `utimensat` is refused only with a path (a `NULL` path
 * is `futimens` on a descriptor the worker opened).
 */
const PATH_METADATA: ReadonlyArray<
  readonly [name: string, x8664: number | null, aarch64: number | null]
> = [
  ["chmod", 90, null],
  ["fchmodat", 268, 53],
  ["fchmodat2", 452, 452],
  ["chown", 92, null],
  ["lchown", 94, null],
  ["fchownat", 260, 54],
  ["utime", 132, null],
  ["utimes", 235, null],
  ["futimesat", 261, null],
  ["setxattr", 188, 5],
  ["lsetxattr", 189, 6],
  ["removexattr", 197, 14],
  ["lremovexattr", 198, 15],
  ["setxattrat", 463, 463],
  ["removexattrat", 466, 466],
];
const UTIMENSAT: Record<SeccompArch, number> = { "x86_64": 280, aarch64: 88 };
const CLONE: Record<SeccompArch, number> = { "x86_64": 56, aarch64: 220 };
const CLONE3 = 435;
const PRCTL: Record<SeccompArch, number> = { "x86_64": 157, aarch64: 167 };
/** `prctl()`'s option that sets (or clears) the parent-death signal. */
const PR_SET_PDEATHSIG = 1;
/** x86_64's `fork` and `vfork` (aarch64 has only `clone`). */
const FORKS: readonly [string, number][] = [["fork", 57], ["vfork", 58]];
/** The `clone()` flag of a thread (a process without it is a new one). */
const CLONE_THREAD = 0x00010000;

/** Options of {@linkcode seccompFilter}. */
export interface SeccompFilterOptions {
  /**
   * The architecture to build for.
   *
   * @default {the running process's (`process.arch`: x64 or arm64)}
   */
  arch?: SeccompArch;
  /**
   * Whether to refuse the path-based metadata calls (`chmod`, `chown`,
   * `utimes` with a path, the `setxattr` family): where Landlock is the
   * only backend (it checks none of them); bubblewrap shows a worker only
   * its grants, read grants read-only.
   *
   * @default {false}
   */
  pathMetadata?: boolean;
  /**
   * Whether the worker has a network namespace of its own (bubblewrap's
   * `--unshare-net`): without `net`, `socket()` then allows routing
   * netlink (`AF_NETLINK`, `NETLINK_ROUTE`), so that listing the
   * interfaces (`os.networkInterfaces()`, Node's `process.report`) works
   * and shows only its loopback. It changes nothing: the worker has no
   * capabilities (`CAP_NET_ADMIN`), and the namespace is its own. Never
   * where the worker shares the host's namespace (Landlock alone), where
   * it would list the host's interfaces and addresses.
   *
   * @default {false}
   */
  routeNetlink?: boolean;
  /**
   * Whether the worker must not outlive its parent by itself: where
   * Landlock is alone, no pid namespace ends its tree with the parent, only
   * the parent-death signal `setpriv` set. Then `prctl(PR_SET_PDEATHSIG)`
   * is refused (a worker cleared the signal, ignored its stdin's end and
   * lived on after its parent's SIGKILL), and, without a `run` grant, every
   * new process (`fork`, `vfork`, `clone` without `CLONE_THREAD`: a child
   * has no parent-death signal). With `run`, its programs' children can
   * outlive it (docs/permissions.md).
   *
   * @default {false}
   */
  parentDeath?: boolean;
}

/**
 * The architecture of this process as the filter names it.
 *
 * @param nodeArch `process.arch`.
 * @returns The architecture, or `undefined` where the filter has no table.
 */
export function seccompArch(nodeArch: string): SeccompArch | undefined {
  if (nodeArch === "x64") return "x86_64";
  if (nodeArch === "arm64") return "aarch64";
  return undefined;
}

/**
 * What the filter refuses for the given grants, in the order it checks: the
 * list docs/permissions.md shows.
 *
 * @param permissions The worker's resolved permissions (`net` decides the
 * socket rule).
 * @param options Whether the path-based metadata calls are refused.
 * @returns One entry per refused system call.
 *
 * @example
 * ```ts
 * import { seccompDenials } from "./seccomp.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const denied = seccompDenials(resolvePermissions(undefined, "/"));
 * assert.ok(denied.some((d) => d.name === "ptrace" && d.when === "always"));
 * assert.ok(denied.some((d) => d.name === "socket" && d.when === "always"));
 * ```
 */
export function seccompDenials(
  permissions: ResolvedPermissions,
  options: Pick<
    SeccompFilterOptions,
    "pathMetadata" | "routeNetlink" | "parentDeath"
  > = {},
): SeccompDenial[] {
  const list: SeccompDenial[] = ALWAYS_DENIED.map(([name]) => ({
    name,
    errno: "EPERM",
    when: name === "iopl" || name === "ioperm" ? "always (x86_64)" : "always",
  }));
  const socket = socketRule(permissions);
  if (socket === "none") {
    list.push({
      name: "socket",
      errno: "EPERM",
      when: options.routeNetlink === true
        ? "but for routing netlink (AF_NETLINK, NETLINK_ROUTE; a network namespace of its own)"
        : "always",
    });
  } else if (socket === "tcp") {
    list.push({
      name: "socket",
      errno: "EPERM",
      when:
        "but for TCP stream sockets (AF_INET, AF_INET6; protocol 0 or IPPROTO_TCP)",
    });
    for (const [name] of SEND_FLAGS) {
      list.push({ name, errno: "EPERM", when: "with MSG_FASTOPEN" });
    }
  }
  if (options.pathMetadata === true) {
    for (const [name, x8664] of PATH_METADATA) {
      list.push({
        name,
        errno: "EPERM",
        when: x8664 === null ? "always (x86_64)" : "always",
      });
    }
    list.push({ name: "utimensat", errno: "EPERM", when: "with a path" });
  }
  if (options.parentDeath === true) {
    list.push({ name: "prctl", errno: "EPERM", when: "with PR_SET_PDEATHSIG" });
    if (noChildren(permissions, options)) {
      for (const [name] of FORKS) {
        list.push({
          name,
          errno: "EPERM",
          when: "always (x86_64), without a run grant",
        });
      }
      list.push({
        name: "clone",
        errno: "EPERM",
        when: "without CLONE_THREAD (a new process), without a run grant",
      });
    }
  }
  list.push(
    {
      name: "clone",
      errno: "EPERM",
      when: "with a CLONE_NEW* (namespace) flag",
    },
    {
      name: "clone3",
      errno: "ENOSYS",
      when: "always (its flags cannot be inspected; libc falls back to clone)",
    },
  );
  return list;
}

/**
 * The seccomp-BPF program for a worker with the given grants: the bytes of
 * its `struct sock_filter` array (8 bytes per instruction), ready for
 * bubblewrap's `--seccomp FD` or `prctl(PR_SET_SECCOMP)`.
 *
 * Sockets: without `net`, `socket()` fails for every family (bubblewrap's
 * empty network namespace and Landlock's TCP rules are then backed by a
 * refusal of UDP and raw sockets too), routing netlink excepted in a
 * network namespace of the worker's own (`routeNetlink`); with `net` scopes, only TCP stream
 * sockets are allowed (`AF_INET`, `AF_INET6`, protocol 0 or `IPPROTO_TCP`:
 * Landlock's port rules cover no other protocol, MPTCP and SCTP included),
 * and sending with `MSG_FASTOPEN` is refused (it connects without
 * `connect()`, which Landlock checks); with `net: true`, sockets are not
 * filtered. `socketpair()` is always allowed: its sockets reach nothing
 * outside the process.
 *
 * @param permissions The worker's resolved permissions.
 * @param options The architecture, and whether to refuse the path-based
 *   metadata calls.
 * @returns The program's bytes.
 * @throws {RangeError} when the architecture is not one the filter knows.
 *
 * @example
 * ```ts
 * import { seccompFilter } from "./seccomp.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = seccompFilter(resolvePermissions(undefined, "/"), { arch: "x86_64" });
 * assert.equal(bytes.byteLength % 8, 0);
 * ```
 */
export function seccompFilter(
  permissions: ResolvedPermissions,
  options: SeccompFilterOptions = {},
): Uint8Array {
  const arch = options.arch ?? seccompArch(process.arch);
  if (arch !== "x86_64" && arch !== "aarch64") {
    throw new RangeError(
      `Cannot build the seccomp filter: no system call table for architecture ${
        JSON.stringify(options.arch ?? process.arch)
      } (known: x86_64, aarch64)`,
    );
  }
  const program: Array<[number, number, number, number]> = [];
  const emit = (code: number, jt: number, jf: number, k: number): void => {
    program.push([code, jt, jf, k >>> 0]);
  };
  const deny = (errno: number): void => emit(RET_K, 0, 0, RET_ERRNO | errno);

  emit(LD_W_ABS, 0, 0, DATA_ARCH);
  emit(JEQ_K, 1, 0, AUDIT_ARCH[arch]);
  emit(RET_K, 0, 0, RET_KILL_PROCESS);
  emit(LD_W_ABS, 0, 0, DATA_NR);
  if (arch === "x86_64") {
    emit(JGE_K, 0, 1, X32_SYSCALL_BIT);
    emit(RET_K, 0, 0, RET_KILL_PROCESS);
  }
  for (const [, x8664, aarch64] of ALWAYS_DENIED) {
    const nr = arch === "x86_64" ? x8664 : aarch64;
    if (nr === null) continue;
    emit(JEQ_K, 0, 1, nr);
    deny(EPERM);
  }
  processRules(emit, arch, permissions, options);
  // socket(domain, ...).
  const socket = socketRule(permissions);
  if (socket === "none" && options.routeNetlink === true) {
    // socket(AF_NETLINK, any type, NETLINK_ROUTE); else EPERM.
    emit(JEQ_K, 0, 6, SOCKET[arch]);
    emit(LD_W_ABS, 0, 0, DATA_ARG0);
    emit(JEQ_K, 0, 3, AF_NETLINK);
    emit(LD_W_ABS, 0, 0, dataArg(2));
    emit(JEQ_K, 0, 1, NETLINK_ROUTE);
    emit(RET_K, 0, 0, RET_ALLOW);
    deny(EPERM);
  } else if (socket === "none") {
    emit(JEQ_K, 0, 1, SOCKET[arch]);
    deny(EPERM);
  } else if (socket === "tcp") {
    // socket(family, type, protocol): AF_INET or AF_INET6, SOCK_STREAM
    // (with any of its flags), protocol 0 or IPPROTO_TCP; else EPERM.
    emit(JEQ_K, 0, 11, SOCKET[arch]);
    emit(LD_W_ABS, 0, 0, DATA_ARG0);
    emit(JEQ_K, 1, 0, AF_INET);
    emit(JEQ_K, 0, 6, AF_INET6);
    emit(LD_W_ABS, 0, 0, dataArg(1));
    emit(AND_K, 0, 0, SOCK_TYPE_MASK);
    emit(JEQ_K, 0, 3, SOCK_STREAM);
    emit(LD_W_ABS, 0, 0, dataArg(2));
    emit(JEQ_K, 2, 0, 0);
    emit(JEQ_K, 1, 0, IPPROTO_TCP);
    deny(EPERM);
    emit(RET_K, 0, 0, RET_ALLOW);
    // TCP Fast Open connects without connect(): past Landlock's port rules.
    for (const [, x8664, aarch64, flagsArg] of SEND_FLAGS) {
      emit(JEQ_K, 0, 4, arch === "x86_64" ? x8664 : aarch64);
      emit(LD_W_ABS, 0, 0, dataArg(flagsArg));
      emit(JSET_K, 0, 1, MSG_FASTOPEN);
      deny(EPERM);
      emit(RET_K, 0, 0, RET_ALLOW);
    }
  }
  if (options.pathMetadata === true) {
    for (const [, x8664, aarch64] of PATH_METADATA) {
      const nr = arch === "x86_64" ? x8664 : aarch64;
      if (nr === null) continue;
      emit(JEQ_K, 0, 1, nr);
      deny(EPERM);
    }
    // utimensat(dirfd, path, times, flags): refused unless path is NULL.
    emit(JEQ_K, 0, 6, UTIMENSAT[arch]);
    emit(LD_W_ABS, 0, 0, dataArg(1));
    emit(JEQ_K, 0, 3, 0);
    emit(LD_W_ABS, 0, 0, dataArg(1) + 4);
    emit(JEQ_K, 0, 1, 0);
    emit(RET_K, 0, 0, RET_ALLOW);
    deny(EPERM);
  }
  emit(RET_K, 0, 0, RET_ALLOW);

  const bytes = new Uint8Array(program.length * 8);
  const view = new DataView(bytes.buffer);
  program.forEach(([code, jt, jf, k], index) => {
    const at = index * 8;
    view.setUint16(at, code, true);
    view.setUint8(at + 2, jt);
    view.setUint8(at + 3, jf);
    view.setUint32(at + 4, k, true);
  });
  return bytes;
}

/**
 * The filter's rules on new processes, the system call number loaded:
 * `clone3` (ENOSYS), `clone` with namespace flags, and with `parentDeath`
 * the parent-death signal and (without `run`) every new process.
 */
function processRules(
  emit: (code: number, jt: number, jf: number, k: number) => void,
  arch: SeccompArch,
  permissions: ResolvedPermissions,
  options: Pick<SeccompFilterOptions, "parentDeath">,
): void {
  const deny = (errno: number): void => emit(RET_K, 0, 0, RET_ERRNO | errno);
  emit(JEQ_K, 0, 1, CLONE3);
  deny(ENOSYS);
  const noFork = noChildren(permissions, options);
  if (noFork && arch === "x86_64") {
    for (const [, nr] of FORKS) {
      emit(JEQ_K, 0, 1, nr);
      deny(EPERM);
    }
  }
  // clone(flags, ...): refuse namespace flags (and a new process, noFork).
  emit(JEQ_K, 0, noFork ? 6 : 4, CLONE[arch]);
  emit(LD_W_ABS, 0, 0, DATA_ARG0);
  emit(JSET_K, 0, 1, CLONE_NAMESPACE_FLAGS);
  deny(EPERM);
  if (noFork) {
    emit(JSET_K, 1, 0, CLONE_THREAD);
    deny(EPERM);
  }
  emit(RET_K, 0, 0, RET_ALLOW);
  if (options.parentDeath === true) {
    // prctl(PR_SET_PDEATHSIG, ...): the parent-death signal stays.
    emit(JEQ_K, 0, 4, PRCTL[arch]);
    emit(LD_W_ABS, 0, 0, DATA_ARG0);
    emit(JEQ_K, 0, 1, PR_SET_PDEATHSIG);
    deny(EPERM);
    emit(RET_K, 0, 0, RET_ALLOW);
  }
}

/** Whether the filter refuses new processes (see `parentDeath`). */
function noChildren(
  permissions: ResolvedPermissions,
  options: Pick<SeccompFilterOptions, "parentDeath">,
): boolean {
  const run = permissions.run;
  return options.parentDeath === true && run !== true && run.length === 0;
}

/** Which sockets the grants allow: none, TCP stream sockets, or all. */
function socketRule(
  permissions: ResolvedPermissions,
): "none" | "tcp" | "all" {
  const net = permissions.net;
  if (net === true) return "all";
  return net.length === 0 ? "none" : "tcp";
}
