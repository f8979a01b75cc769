// Attack class: sockets the grants do not name (issue 24 item 2). With
// `net: ["127.0.0.1:P"]`, 0.2 let a worker's native code open
// socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP) and connect to any port: the
// host listener accepted. Landlock's TCP port rules cover only IPPROTO_TCP
// sockets, and the seccomp filter let every family but AF_UNIX through
// (MPTCP, SCTP, SMC, UDP, raw, packet and netlink sockets). With `net`
// scopes the filter now allows only TCP stream sockets (AF_INET, AF_INET6;
// protocol 0 or IPPROTO_TCP): every other socket fails with EPERM. Native
// code through the FFI (Deno with `ffi` granted, Bun's bun:ffi). Runs with
// bubblewrap and Landlock, and (second CI pass) with Landlock alone.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { createSocket, type Socket } from "node:dgram";
import { session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool } from "../_helpers/tools.ts";
import { sandboxSkip } from "./_sandbox.ts";
import { NATIVE_PRELUDE } from "./_native.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
const SKIP = sandboxSkip();
const EPERM = 1;

/** A TCP listener on loopback that counts what it accepts. */
interface Listener {
  server: Server;
  port: number;
  accepted: number;
}

async function listen(): Promise<Listener> {
  const listener: Listener = { server: createServer(), port: 0, accepted: 0 };
  listener.server.on("connection", (socket) => {
    listener.accepted++;
    socket.destroy();
  });
  await new Promise<void>((resolve) =>
    listener.server.listen(0, "127.0.0.1", resolve)
  );
  listener.port = (listener.server.address() as { port: number }).port;
  return listener;
}

let granted: Listener;
let other: Listener;
let udp: Socket;
let udpPort = 0;
let datagrams = 0;

before(async () => {
  granted = await listen();
  other = await listen();
  udp = createSocket("udp4");
  udp.on("message", () => datagrams++);
  await new Promise<void>((resolve) => udp.bind(0, "127.0.0.1", resolve));
  udpPort = udp.address().port;
});

after(async () => {
  await new Promise((resolve) => granted.server.close(resolve));
  await new Promise((resolve) => other.server.close(resolve));
  await new Promise<void>((resolve) => udp.close(() => resolve()));
});

/** Opens a socket and connects it to 127.0.0.1:port, natively. */
const CONNECT = `${NATIVE_PRELUDE}
const [family, type, protocol, port] = arg;
const socket = sys("socket", family, type, protocol);
if (socket.result < 0) return { socket: socket.errno };
const addr = sockaddrIn(port);
const connected = sys("connect", socket.result, addr, addr.byteLength);
sys("close", socket.result);
return { connect: connected.result === 0 ? "connected" : connected.errno };`;

/** TCP Fast Open: sendto(MSG_FASTOPEN) connects without connect(). */
const FAST_OPEN = `${NATIVE_PRELUDE}
const socket = sys("socket", 2, 1, 0);
if (socket.result < 0) return { socket: socket.errno };
const addr = sockaddrIn(arg);
const data = new Uint8Array([120]);
const sent = sys("sendto", socket.result, data, 1n, 0x20000000, addr, addr.byteLength);
sys("close", socket.result);
return { sendto: sent.result >= 0 ? "sent" : sent.errno };`;

/** A UDP datagram to 127.0.0.1:port. */
const DATAGRAM = `${NATIVE_PRELUDE}
const socket = sys("socket", 2, 2, 0); // SOCK_DGRAM
if (socket.result < 0) return { socket: socket.errno };
const addr = sockaddrIn(arg);
const data = new Uint8Array([120]);
const sent = sys("sendto", socket.result, data, 1n, 0, addr, addr.byteLength);
sys("close", socket.result);
return { sendto: sent.result >= 0 ? "sent" : sent.errno };`;

const AF_INET = 2;
const AF_INET6 = 10;
const AF_PACKET = 17;
const AF_NETLINK = 16;
const AF_SMC = 43;
const AF_VSOCK = 40;
const SOCK_STREAM = 1;
const SOCK_RAW = 3;
const SOCK_SEQPACKET = 5;
const SOCK_NONBLOCK_CLOEXEC = 0o4000 | 0o2000000;
const IPPROTO_TCP = 6;
const IPPROTO_SCTP = 132;
const IPPROTO_MPTCP = 262;

async function worker_(net: string[]) {
  return await session<typeof evaluate>(worker, {
    ...captureLog(),
    sandbox: "os",
    // Deno's own flags would refuse a JavaScript socket first: native code
    // through ffi is what the OS sandbox alone must stop.
    permissions: {
      net,
      ...(RUNTIME === "deno" ? { ffi: true } : {}),
      // Without bubblewrap a host:port grant holds by port only (Landlock),
      // which strict refuses: what that hold leaves open is the point here.
      ...(hasTool("bwrap") ? {} : { enforce: "best-effort" as const }),
    },
  });
}

describe("sockets the net grant does not name", { skip: SKIP }, () => {
  test("an MPTCP socket cannot reach an ungranted port", async () => {
    await using s = await worker_([`127.0.0.1:${granted.port}`]);
    // The granted port over TCP works (the test's own check).
    const tcp = await s.run(CONNECT, [AF_INET, SOCK_STREAM, 0, granted.port]);
    assert.deepEqual(tcp, { ok: true, value: { connect: "connected" } });
    const tcpExplicit = await s.run(CONNECT, [
      AF_INET,
      SOCK_STREAM | SOCK_NONBLOCK_CLOEXEC,
      IPPROTO_TCP,
      granted.port,
    ]);
    assert.ok(tcpExplicit.ok, JSON.stringify(tcpExplicit));
    const before = other.accepted;
    for (const family of [AF_INET, AF_INET6]) {
      const mptcp = await s.run(CONNECT, [
        family,
        SOCK_STREAM,
        IPPROTO_MPTCP,
        other.port,
      ]);
      assert.deepEqual(mptcp, { ok: true, value: { socket: EPERM } });
    }
    // Plain TCP to the other port is Landlock's refusal.
    const plain = await s.run(CONNECT, [AF_INET, SOCK_STREAM, 0, other.port]);
    assert.notDeepEqual(plain, { ok: true, value: { connect: "connected" } });
    assert.equal(other.accepted, before);
  });

  test("SCTP, SMC, raw, packet, netlink and vsock sockets are refused", async () => {
    await using s = await worker_([`127.0.0.1:${granted.port}`]);
    for (
      const [family, type, protocol] of [
        [AF_INET, SOCK_STREAM, IPPROTO_SCTP],
        [AF_INET, SOCK_SEQPACKET, IPPROTO_SCTP],
        [AF_INET6, SOCK_STREAM, IPPROTO_SCTP],
        [AF_SMC, SOCK_STREAM, 0],
        [AF_INET, SOCK_RAW, 1],
        [AF_PACKET, SOCK_RAW, 0],
        [AF_NETLINK, SOCK_RAW, 0],
        [AF_VSOCK, SOCK_STREAM, 0],
      ]
    ) {
      const outcome = await s.run(CONNECT, [family, type, protocol, 9]);
      assert.deepEqual(
        outcome,
        { ok: true, value: { socket: EPERM } },
        `socket(${family}, ${type}, ${protocol}): ${JSON.stringify(outcome)}`,
      );
    }
  });

  test("TCP Fast Open cannot reach an ungranted port", async () => {
    await using s = await worker_([`127.0.0.1:${granted.port}`]);
    const before = other.accepted;
    const outcome = await s.run(FAST_OPEN, other.port);
    assert.ok(outcome.ok, JSON.stringify(outcome));
    assert.notDeepEqual(outcome.value, { sendto: "sent" });
    // What a connection would have shown by now: the granted port's.
    const granted_ = granted.accepted;
    await s.run(CONNECT, [AF_INET, SOCK_STREAM, 0, granted.port]);
    await waitFor(() => granted.accepted > granted_);
    assert.equal(other.accepted, before);
  });

  test("a UDP datagram is refused with net scopes", async () => {
    await using s = await worker_([`127.0.0.1:${granted.port}`]);
    const outcome = await s.run(DATAGRAM, udpPort);
    assert.deepEqual(outcome, { ok: true, value: { socket: EPERM } });
    assert.equal(datagrams, 0);
  });
});

async function waitFor(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("timed out waiting");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
