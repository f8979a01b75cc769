// Attack class: routing netlink without a net grant (issue 28 item 2).
// Listing the network interfaces (os.networkInterfaces(), Node's
// process.report, which libsql's loader calls) opens an AF_NETLINK socket
// of protocol NETLINK_ROUTE; the seccomp filter refused every socket
// without `net`, so such a client needed `net: true`. Inside bubblewrap a
// worker without net has a network namespace of its own, so the filter now
// allows that one socket there: the worker sees only its loopback, and its
// requests to change addresses, routes or links fail (it has no
// capabilities). Without bubblewrap (Landlock alone) it shares the host's
// namespace, and the socket stays refused: it would list the host's
// interfaces. Other netlink protocols stay refused everywhere. Native code
// through the FFI, as a hostile client would. Runs with bubblewrap and
// Landlock, and (second CI pass) with Landlock alone.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { networkInterfaces } from "node:os";
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
const BWRAP = hasTool("bwrap");

/**
 * Opens socket(AF_NETLINK, SOCK_RAW, arg.protocol) and, for NETLINK_ROUTE,
 * dumps the links (their names) and asks to add an address and a route to
 * the loopback and to take it down: each request's acknowledgement error.
 */
const NETLINK = `${NATIVE_PRELUDE}
const fd = sys("socket", 16, 3 | 0o2000000, arg.protocol);
if (fd.result < 0) return { socket: fd.errno };
if (arg.protocol !== 0) { sys("close", fd.result); return { socket: "open" }; }
let seq = 1;
const message = (type, flags, body) => {
  const buf = new Uint8Array(16 + body.length);
  const view = new DataView(buf.buffer);
  view.setUint32(0, buf.length, true);
  view.setUint16(4, type, true);
  view.setUint16(6, flags, true);
  view.setUint32(8, seq++, true);
  buf.set(body, 16);
  return buf;
};
const attr = (type, bytes) => {
  const out = new Uint8Array((4 + bytes.length + 3) & ~3);
  new DataView(out.buffer).setUint16(0, 4 + bytes.length, true);
  new DataView(out.buffer).setUint16(2, type, true);
  out.set(bytes, 4);
  return out;
};
const concat = (...parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
};
const u32 = (n) => { const b = new Uint8Array(4); new DataView(b.buffer).setUint32(0, n, true); return b; };
const buffer = new Uint8Array(65536);
// Reads until an acknowledgement (NLMSG_ERROR) or the dump's end.
const receive = (onMessage) => {
  for (let reads = 0; reads < 64; reads++) {
    const got = sys("recv", fd.result, buffer, BigInt(buffer.length), 0);
    if (got.result < 0) return "recv errno " + got.errno;
    const view = new DataView(buffer.buffer, 0, got.result);
    for (let at = 0; at + 16 <= got.result;) {
      const len = view.getUint32(at, true);
      const type = view.getUint16(at + 4, true);
      if (len < 16) return "bad length";
      if (type === 3) return "done";
      if (type === 2) return -view.getInt32(at + 16, true);
      onMessage(type, at, len, view);
      at += (len + 3) & ~3;
    }
  }
  return "too many reads";
};
const request = (msg) => {
  const sent = sys("send", fd.result, msg, BigInt(msg.length), 0);
  if (sent.result < 0) return "send errno " + sent.errno;
  return receive(() => {});
};
// RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP: every link's IFLA_IFNAME.
const links = [];
const sentDump = sys("send", fd.result, message(18, 0x301, new Uint8Array(16)), 32n, 0);
const dumped = sentDump.result < 0 ? "send errno " + sentDump.errno : receive((type, at, len, view) => {
  if (type !== 16) return;
  for (let a = at + 32; a + 4 <= at + len;) {
    const alen = view.getUint16(a, true);
    if (alen < 4) break;
    if (view.getUint16(a + 2, true) === 3) {
      links.push(new TextDecoder().decode(new Uint8Array(view.buffer, a + 4, alen - 5)));
    }
    a += (alen + 3) & ~3;
  }
});
const ACK_CREATE = 0x1 | 0x4 | 0x400 | 0x200;
// RTM_NEWADDR 10.99.0.1/32 on link 1 (lo).
const ifaddr = new Uint8Array([2, 32, 0, 0, 1, 0, 0, 0]);
const ip = new Uint8Array([10, 99, 0, 1]);
const addAddress = request(message(20, ACK_CREATE, concat(ifaddr, attr(2, ip), attr(1, ip))));
// RTM_NEWROUTE 10.98.0.0/16 through link 1, main table, static, unicast.
const rtmsg = new Uint8Array([2, 16, 0, 0, 254, 4, 0, 1, 0, 0, 0, 0]);
const addRoute = request(message(24, ACK_CREATE, concat(rtmsg, attr(1, new Uint8Array([10, 98, 0, 0])), attr(4, u32(1)))));
// RTM_SETLINK link 1 down (change IFF_UP, flags 0).
const ifinfo = new Uint8Array(16);
new DataView(ifinfo.buffer).setInt32(4, 1, true);
new DataView(ifinfo.buffer).setUint32(12, 1, true);
const linkDown = request(message(19, 0x1 | 0x4, ifinfo));
sys("close", fd.result);
return { socket: "open", dumped, links, addAddress, addRoute, linkDown };`;

async function noNet() {
  return await session<typeof evaluate>(worker, {
    ...captureLog(),
    sandbox: "os",
    // Deno's own flags would refuse the FFI first: native code is what the
    // OS sandbox alone must stop.
    permissions: RUNTIME === "deno" ? { ffi: true } : {},
  });
}

describe("routing netlink without a net grant", { skip: SKIP }, () => {
  test(
    BWRAP
      ? "inside bubblewrap a worker lists only its own loopback and changes nothing"
      : "under Landlock alone the socket is refused (the host's namespace)",
    async () => {
      await using s = await noNet();
      const outcome = await s.run(NETLINK, { protocol: 0 });
      if (!BWRAP) {
        assert.deepEqual(outcome, { ok: true, value: { socket: EPERM } });
        return;
      }
      assert.deepEqual(outcome, {
        ok: true,
        value: {
          socket: "open",
          dumped: "done",
          links: ["lo"],
          addAddress: EPERM,
          addRoute: EPERM,
          linkDown: EPERM,
        },
      });
      // The host's own interfaces are not what the worker saw.
      assert.ok(
        Object.keys(networkInterfaces()).some((name) => name !== "lo"),
        "the host has an interface besides lo (the test's own check)",
      );
    },
  );

  test("other netlink protocols and IP sockets stay refused", async () => {
    await using s = await noNet();
    // NETLINK_SOCK_DIAG, NETLINK_AUDIT, NETLINK_NETFILTER,
    // NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC.
    for (const protocol of [4, 9, 12, 15, 16]) {
      const outcome = await s.run(NETLINK, { protocol });
      assert.deepEqual(
        outcome,
        { ok: true, value: { socket: EPERM } },
        `netlink protocol ${protocol}: ${JSON.stringify(outcome)}`,
      );
    }
    const tcp = await s.run(
      `${NATIVE_PRELUDE}
const socket = sys("socket", 2, 1, 0);
if (socket.result >= 0) sys("close", socket.result);
return socket.result < 0 ? socket.errno : "open";`,
    );
    assert.deepEqual(tcp, { ok: true, value: EPERM });
  });

  test("os.networkInterfaces() without net: the loopback inside bubblewrap, refused alone", async () => {
    await using s = await session<typeof evaluate>(worker, {
      ...captureLog(),
      sandbox: "os",
      permissions: RUNTIME === "deno" ? { sys: ["networkInterfaces"] } : {},
    });
    const outcome = await s.run(
      `const os = await import("node:os"); return Object.keys(os.networkInterfaces());`,
    );
    if (BWRAP) assert.deepEqual(outcome, { ok: true, value: ["lo"] });
    else assert.equal(outcome.ok, false, JSON.stringify(outcome));
  });
});
