import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  seccompArch,
  seccompDenials,
  seccompFilter,
} from "../../src/runtime/sandbox/seccomp.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";

const X86_64 = 0xc000003e;
const AARCH64 = 0xc00000b7;
const I386 = 0x40000003;
const ALLOW = "allow";
const KILL = "kill";

/**
 * Runs a classic BPF seccomp program on one system call, as the kernel does:
 * the loads, jumps and returns the filter uses, and nothing else (anything
 * else fails the test).
 */
function run(
  program: Uint8Array,
  call: { arch: number; nr: number; arg0?: number; args?: number[] },
): string {
  const view = new DataView(program.buffer, program.byteOffset);
  const data = new DataView(new ArrayBuffer(64));
  data.setUint32(0, call.nr, true);
  data.setUint32(4, call.arch, true);
  const args = call.args ?? [call.arg0 ?? 0];
  // Each argument is 64 bits; a value past 32 bits sets the high word.
  args.forEach((value, index) => {
    data.setUint32(16 + 8 * index, value % 2 ** 32, true);
    data.setUint32(20 + 8 * index, Math.floor(value / 2 ** 32), true);
  });
  let acc = 0;
  for (let pc = 0; pc < program.byteLength / 8;) {
    const at = pc * 8;
    const code = view.getUint16(at, true);
    const jt = view.getUint8(at + 2);
    const jf = view.getUint8(at + 3);
    const k = view.getUint32(at + 4, true);
    switch (code) {
      case 0x20:
        acc = data.getUint32(k, true);
        pc++;
        break;
      case 0x15:
        pc += 1 + (acc === k ? jt : jf);
        break;
      case 0x35:
        pc += 1 + (acc >= k ? jt : jf);
        break;
      case 0x45:
        pc += 1 + ((acc & k) !== 0 ? jt : jf);
        break;
      case 0x54:
        acc = (acc & k) >>> 0;
        pc++;
        break;
      case 0x06:
        if (k === 0x7fff0000) return ALLOW;
        if (k === 0x80000000) return KILL;
        if ((k & 0xffff0000) === 0x00050000) return `errno ${k & 0xffff}`;
        throw new Error(`unexpected return ${k.toString(16)}`);
      default:
        throw new Error(`unexpected opcode ${code.toString(16)} at ${pc}`);
    }
  }
  throw new Error("fell off the end of the program");
}

const NOTHING = resolvePermissions(undefined, "/");
const PORTS = resolvePermissions({ net: ["localhost:5432"] }, "/");
const ALL_NET = resolvePermissions({ net: true }, "/");
const x86 = (permissions = NOTHING) =>
  seccompFilter(permissions, { arch: "x86_64" });
const arm = (permissions = NOTHING) =>
  seccompFilter(permissions, { arch: "aarch64" });

describe("seccompFilter()", () => {
  test("seccompFilter() allows ordinary system calls (read, openat, mmap, execve)", () => {
    for (const nr of [0, 257, 9, 59, 62]) {
      assert.equal(run(x86(), { arch: X86_64, nr }), ALLOW, `x86_64 ${nr}`);
    }
    for (const nr of [63, 56, 222, 221]) {
      assert.equal(run(arm(), { arch: AARCH64, nr }), ALLOW, `aarch64 ${nr}`);
    }
  });

  test("seccompFilter() refuses ptrace, process_vm_readv/writev and io_uring with EPERM", () => {
    for (const nr of [101, 310, 311, 425, 426, 427, 321, 298, 323, 250]) {
      assert.equal(run(x86(), { arch: X86_64, nr }), "errno 1", `x86_64 ${nr}`);
    }
    for (const nr of [117, 270, 271, 425, 426, 427, 280, 241, 282, 219]) {
      assert.equal(
        run(arm(), { arch: AARCH64, nr }),
        "errno 1",
        `aarch64 ${nr}`,
      );
    }
  });

  test("seccompFilter() refuses System V IPC and POSIX message queues", () => {
    for (const nr of [29, 30, 64, 65, 68, 69, 240]) {
      assert.equal(run(x86(), { arch: X86_64, nr }), "errno 1", `x86_64 ${nr}`);
    }
    for (const nr of [194, 196, 190, 193, 186, 189, 180]) {
      assert.equal(
        run(arm(), { arch: AARCH64, nr }),
        "errno 1",
        `aarch64 ${nr}`,
      );
    }
  });

  test("seccompFilter() refuses mounts and new namespaces", () => {
    for (const nr of [165, 166, 155, 161, 272, 308, 428, 429, 430]) {
      assert.equal(run(x86(), { arch: X86_64, nr }), "errno 1", `${nr}`);
    }
  });

  test("seccompFilter() refuses clone with a namespace flag and allows threads and forks", () => {
    const CLONE_NEWUSER = 0x10000000;
    const CLONE_NEWNET = 0x40000000;
    const THREAD = 0x3d0f00; // CLONE_VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
    assert.equal(run(x86(), { arch: X86_64, nr: 56, arg0: THREAD }), ALLOW);
    assert.equal(run(x86(), { arch: X86_64, nr: 56, arg0: 17 }), ALLOW);
    assert.equal(
      run(x86(), { arch: X86_64, nr: 56, arg0: CLONE_NEWUSER | 17 }),
      "errno 1",
    );
    assert.equal(
      run(arm(), { arch: AARCH64, nr: 220, arg0: CLONE_NEWNET }),
      "errno 1",
    );
  });

  test("seccompFilter() answers clone3 with ENOSYS, so libc falls back to clone", () => {
    assert.equal(run(x86(), { arch: X86_64, nr: 435 }), "errno 38");
    assert.equal(run(arm(), { arch: AARCH64, nr: 435 }), "errno 38");
  });

  test("seccompFilter() without net refuses every socket family", () => {
    for (const family of [1, 2, 10, 16, 17]) {
      assert.equal(
        run(x86(), { arch: X86_64, nr: 41, arg0: family }),
        "errno 1",
      );
      assert.equal(
        run(arm(), { arch: AARCH64, nr: 198, arg0: family }),
        "errno 1",
      );
    }
    // socketpair stays allowed: its sockets reach nothing outside.
    assert.equal(run(x86(), { arch: X86_64, nr: 53, arg0: 1 }), ALLOW);
  });

  test("seccompFilter() with routeNetlink allows routing netlink only, and only without net", () => {
    for (
      const [arch, nr, build] of [[X86_64, 41, "x86_64"], [
        AARCH64,
        198,
        "aarch64",
      ]] as const
    ) {
      const program = (permissions = NOTHING) =>
        seccompFilter(permissions, { arch: build, routeNetlink: true });
      const socket = (
        p: Uint8Array,
        family: number,
        type: number,
        protocol: number,
      ) => run(p, { arch, nr, args: [family, type, protocol] });
      // AF_NETLINK, NETLINK_ROUTE: raw or datagram, with its flags.
      assert.equal(socket(program(), 16, 3, 0), ALLOW);
      assert.equal(socket(program(), 16, 2 | 0o2000000, 0), ALLOW);
      // Every other netlink protocol: SOCK_DIAG, AUDIT, NETFILTER,
      // KOBJECT_UEVENT, GENERIC (the kernel reads the protocol as an int:
      // only its low 32 bits count, as here).
      for (const protocol of [4, 9, 12, 15, 16, 2 ** 32 + 16]) {
        assert.equal(
          socket(program(), 16, 3, protocol),
          "errno 1",
          `${protocol}`,
        );
      }
      // Every other family, protocol 0 or not.
      for (const family of [1, 2, 10, 17, 40, 43]) {
        assert.equal(socket(program(), family, 1, 0), "errno 1", `${family}`);
      }
      // Not without the option (Landlock alone: the host's namespace).
      assert.equal(
        socket(seccompFilter(NOTHING, { arch: build }), 16, 3, 0),
        "errno 1",
      );
      // With net scopes the TCP rule applies: no netlink there either.
      assert.equal(socket(program(PORTS), 16, 3, 0), "errno 1");
      assert.equal(socket(program(PORTS), 2, 1, 0), ALLOW);
      // Other calls pass the socket rule untouched.
      assert.equal(
        run(program(), { arch, nr: arch === X86_64 ? 0 : 63 }),
        ALLOW,
      );
    }
    assert.match(
      seccompDenials(NOTHING, { routeNetlink: true }).find((d) =>
        d.name === "socket"
      )?.when ?? "",
      /NETLINK_ROUTE/,
    );
  });

  test("seccompFilter() with net scopes allows TCP stream sockets only", () => {
    const STREAM = 1;
    const FLAGS = 0o4000 | 0o2000000; // SOCK_NONBLOCK | SOCK_CLOEXEC
    for (
      const [filter, arch, nr] of [[x86(PORTS), X86_64, 41], [
        arm(PORTS),
        AARCH64,
        198,
      ]] as const
    ) {
      const socket = (family: number, type: number, protocol: number) =>
        run(filter, { arch, nr, args: [family, type, protocol] });
      assert.equal(socket(2, STREAM, 0), ALLOW);
      assert.equal(socket(10, STREAM | FLAGS, 6), ALLOW);
      assert.equal(socket(2, STREAM, 262), "errno 1", "MPTCP");
      assert.equal(socket(10, STREAM, 262), "errno 1", "MPTCP over IPv6");
      assert.equal(socket(2, STREAM, 132), "errno 1", "SCTP");
      assert.equal(socket(2, 5, 132), "errno 1", "SCTP seqpacket");
      assert.equal(socket(2, 2, 0), "errno 1", "UDP");
      assert.equal(socket(2, 3, 1), "errno 1", "raw");
      assert.equal(socket(1, STREAM, 0), "errno 1", "unix");
      assert.equal(socket(16, 3, 0), "errno 1", "netlink");
      assert.equal(socket(17, 3, 0), "errno 1", "packet");
      assert.equal(socket(43, STREAM, 0), "errno 1", "SMC");
    }
  });

  test("seccompFilter() with net scopes refuses TCP Fast Open (sendto, sendmsg, sendmmsg with MSG_FASTOPEN)", () => {
    const FASTOPEN = 0x20000000;
    const calls = [
      [x86(PORTS), X86_64, 44, 3],
      [x86(PORTS), X86_64, 46, 2],
      [x86(PORTS), X86_64, 307, 3],
      [arm(PORTS), AARCH64, 206, 3],
      [arm(PORTS), AARCH64, 211, 2],
      [arm(PORTS), AARCH64, 269, 3],
    ] as const;
    for (const [filter, arch, nr, flagsArg] of calls) {
      const send = (flags: number) => {
        const args = [3, 0, 0, 0];
        args[flagsArg] = flags;
        return run(filter, { arch, nr, args });
      };
      assert.equal(send(FASTOPEN), "errno 1", `${nr}`);
      assert.equal(send(FASTOPEN | 0x40), "errno 1", `${nr}`);
      assert.equal(send(0x4000), ALLOW, `${nr} MSG_NOSIGNAL`);
    }
    // Without net there is no socket to send on; with net: true, no check.
    const flags = [3, 0, 0, FASTOPEN];
    assert.equal(
      run(x86(ALL_NET), { arch: X86_64, nr: 44, args: flags }),
      ALLOW,
    );
  });

  test("seccompFilter() with pathMetadata refuses path-based chmod, chown, utimes and xattr calls", () => {
    const alone = seccompFilter(NOTHING, {
      arch: "x86_64",
      pathMetadata: true,
    });
    const aloneArm = seccompFilter(NOTHING, {
      arch: "aarch64",
      pathMetadata: true,
    });
    // chmod fchmodat fchmodat2 chown lchown fchownat utime utimes futimesat
    // setxattr lsetxattr removexattr lremovexattr setxattrat removexattrat
    for (
      const nr of [
        90,
        268,
        452,
        92,
        94,
        260,
        132,
        235,
        261,
        188,
        189,
        197,
        198,
        463,
        466,
      ]
    ) {
      assert.equal(run(alone, { arch: X86_64, nr }), "errno 1", `${nr}`);
      assert.equal(
        run(x86(), { arch: X86_64, nr }),
        ALLOW,
        `${nr} with bubblewrap`,
      );
    }
    for (const nr of [53, 452, 54, 5, 6, 14, 15]) {
      assert.equal(run(aloneArm, { arch: AARCH64, nr }), "errno 1", `${nr}`);
    }
    // The descriptor forms stay: fchmod, fchown, fsetxattr, futimens.
    for (const nr of [91, 93, 190]) {
      assert.equal(run(alone, { arch: X86_64, nr }), ALLOW, `${nr}`);
    }
    // utimensat: refused with a path, allowed with NULL (futimens).
    assert.equal(run(alone, { arch: X86_64, nr: 280, args: [3, 0] }), ALLOW);
    assert.equal(
      run(alone, { arch: X86_64, nr: 280, args: [3, 0x1000] }),
      "errno 1",
    );
    assert.equal(
      run(alone, { arch: X86_64, nr: 280, args: [3, 2 ** 40] }),
      "errno 1",
    );
    assert.equal(run(aloneArm, { arch: AARCH64, nr: 88, args: [3, 0] }), ALLOW);
    assert.equal(
      run(aloneArm, { arch: AARCH64, nr: 88, args: [-100 >>> 0, 0x1000] }),
      "errno 1",
    );
  });

  test("seccompFilter() with net: true leaves sockets alone", () => {
    assert.equal(run(x86(ALL_NET), { arch: X86_64, nr: 41, arg0: 1 }), ALLOW);
    assert.equal(run(x86(ALL_NET), { arch: X86_64, nr: 101 }), "errno 1");
  });

  test("seccompFilter() kills a call of another architecture or the x32 ABI", () => {
    assert.equal(run(x86(), { arch: I386, nr: 1 }), KILL);
    assert.equal(run(x86(), { arch: AARCH64, nr: 63 }), KILL);
    assert.equal(run(arm(), { arch: X86_64, nr: 0 }), KILL);
    assert.equal(run(x86(), { arch: X86_64, nr: 0x40000000 | 0 }), KILL);
  });

  test("seccompFilter() keeps its jumps in range and is the same for the same grants", () => {
    const program = x86();
    assert.equal(program.byteLength % 8, 0);
    assert.ok(program.byteLength / 8 < 4096);
    assert.deepEqual(x86(), program);
    assert.notDeepEqual(x86(PORTS), program);
  });

  test("seccompFilter() refuses an architecture it has no table for", () => {
    assert.throws(
      () => seccompFilter(NOTHING, { arch: "riscv64" as "x86_64" }),
      RangeError,
    );
    assert.equal(seccompArch("x64"), "x86_64");
    assert.equal(seccompArch("arm64"), "aarch64");
    assert.equal(seccompArch("ia32"), undefined);
  });
});

describe("seccompDenials()", () => {
  test("seccompDenials() are all listed in docs/permissions.md", () => {
    const docs = readFileSync(
      new URL("../../docs/permissions.md", import.meta.url),
      "utf8",
    );
    for (
      const denial of [
        ...seccompDenials(NOTHING),
        ...seccompDenials(PORTS, { pathMetadata: true }),
        ...seccompDenials(NOTHING, { parentDeath: true }),
      ]
    ) {
      assert.ok(docs.includes(`\`${denial.name}\``), denial.name);
    }
  });

  test("seccompDenials() with parentDeath refuses the parent-death signal, and new processes without run", () => {
    const denied = (permissions: typeof NOTHING) =>
      seccompDenials(permissions, { parentDeath: true }).map((d) =>
        `${d.name} ${d.when}`
      );
    assert.ok(denied(NOTHING).includes("prctl with PR_SET_PDEATHSIG"));
    assert.ok(
      denied(NOTHING).some((d) => /^clone without CLONE_THREAD/.test(d)),
    );
    assert.ok(denied(NOTHING).some((d) => d.startsWith("fork ")));
    const run = { ...NOTHING, run: ["ls"] };
    assert.ok(denied(run).includes("prctl with PR_SET_PDEATHSIG"));
    assert.ok(
      !denied(run).some((d) => /^(fork|vfork) |without CLONE_THREAD/.test(d)),
    );
    assert.ok(!seccompDenials(NOTHING).some((d) => d.name === "prctl"));
  });

  test("seccompDenials() lists what the filter refuses, socket rule by grant", () => {
    const names = seccompDenials(NOTHING).map((denial) => denial.name);
    for (
      const name of [
        "ptrace",
        "process_vm_readv",
        "io_uring_setup",
        "clone3",
        "socket",
      ]
    ) {
      assert.ok(names.includes(name), name);
    }
    const socket = (permissions: typeof NOTHING) =>
      seccompDenials(permissions).find((denial) => denial.name === "socket");
    assert.equal(socket(NOTHING)?.when, "always");
    assert.match(socket(PORTS)?.when ?? "", /TCP stream/);
    assert.equal(socket(ALL_NET), undefined);
  });
});
