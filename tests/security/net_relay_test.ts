// The native relay (issue 26) from the sandbox's side, played by a hostile
// process in a network namespace of its own (bubblewrap --unshare-net, as a
// worker's): it hands over sockets with SCM_RIGHTS as the native confine
// step does, or anything else instead, then connects as a client would.
// The relay must take exactly one handover of exactly the expected
// listening sockets, close anything else it is handed, refuse every later
// connection to its socket, connect only where the parent's broker says,
// relay both ways with a half-close, refuse past 256 connections with an
// event, and hold a server back when the client never reads. The
// sandboxed end to end tests are net_host_test.ts.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import dc from "node:diagnostics_channel";
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";
import { createServer, type Server, type Socket } from "node:net";
import { netLayout } from "../../src/runtime/sandbox/net/targets.ts";
import {
  NET_CONNECTION_CHANNEL,
  type NetConnectionEvent,
  startNetBroker,
} from "../../src/runtime/sandbox/net/broker.ts";
import { netRelay } from "../../src/runtime/sandbox/net/relay.ts";
import { detect } from "../../src/runtime/detect.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";
import { until, within } from "../_helpers/wait.ts";

checkNoLeaks();

/** The sandbox's side: modes below; prints what it saw, one line each. */
const SANDBOX = String.raw`
import os, socket, sys, time, array
path, mode, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
def listener(p=port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", p)); s.listen(4096); return s
u = socket.socket(socket.AF_UNIX); u.connect(path)
keep = []
if mode == "garbage":
    u.sendall(b"hello, relay\n")
elif mode == "wrong-port":
    keep.append(listener(port + 1)); socket.send_fds(u, [b"airlock-net/1\n"], [keep[0].fileno()])
elif mode == "connected":
    l = listener(); c = socket.create_connection(("127.0.0.1", port)); keep += [l, c]
    socket.send_fds(u, [b"airlock-net/1\n"], [c.fileno()])
elif mode == "udp":
    d = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); d.bind(("127.0.0.1", port)); keep.append(d)
    socket.send_fds(u, [b"airlock-net/1\n"], [d.fileno()])
elif mode == "extra":
    keep += [listener(), listener(port + 1)]
    socket.send_fds(u, [b"airlock-net/1\n"], [k.fileno() for k in keep])
else:
    keep.append(listener()); socket.send_fds(u, [b"airlock-net/1\n"], [keep[0].fileno()])
u.close()
for k in keep:
    if k.type == socket.SOCK_STREAM and mode != "connected": k.close()
time.sleep(0.2)
try:
    again = socket.socket(socket.AF_UNIX); again.connect(path); print("second handover connected", flush=True)
except OSError as e:
    print("second handover refused", e.errno, flush=True)
if mode == "echo":
    data = bytes(i * 7 % 256 for i in range(1 << 16)) * 64
    c = socket.create_connection(("127.0.0.1", port))
    c.sendall(data); c.shutdown(socket.SHUT_WR)
    back = bytearray()
    while True:
        b = c.recv(1 << 20)
        if not b: break
        back += b
    print("echo", "same" if bytes(back) == data else "different", len(back), flush=True)
elif mode == "flood":
    cs = []
    for i in range(300):
        c = socket.create_connection(("127.0.0.1", port)); cs.append(c)
    print("opened", len(cs), flush=True); sys.stdin.read()
elif mode == "later":
    print("waiting", flush=True); sys.stdin.readline()
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).recv(1); print("later connected", flush=True)
    except OSError as e:
        print("later refused", e.errno, flush=True)
elif mode == "stall":
    c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", port)); print("stalled", flush=True); sys.stdin.read()
`;

const bwrap = (() => {
  try {
    return execFileSync("sh", ["-c", "command -v bwrap"], { encoding: "utf8" })
      .trim();
  } catch {
    return "";
  }
})();

/** The sandbox's side in a network namespace of its own; its lines as they come. */
function sandbox(socket: string, mode: string, port: number) {
  const child = spawn(bwrap, [
    "--unshare-net",
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--die-with-parent",
    "python3",
    "-c",
    SANDBOX,
    socket,
    mode,
    String(port),
  ], { stdio: ["pipe", "pipe", "inherit"] });
  const lines: string[] = [];
  let text = "";
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (chunk: string) => {
    text += chunk;
    const parts = text.split("\n");
    text = parts.pop() ?? "";
    lines.push(...parts);
  });
  const exited = new Promise<void>((resolve) =>
    child.on("exit", () => resolve())
  );
  return {
    lines,
    exited,
    say(line: string) {
      child.stdin.write(`${line}\n`);
    },
    stop() {
      child.stdin.end();
      child.kill("SIGKILL");
      return exited;
    },
  };
}

/** The relay process of this test process (below its bubblewrap), if one runs. */
function relayPid(): number | undefined {
  const parents = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      parents.set(
        Number(entry),
        Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]),
      );
    } catch {
      // Gone.
    }
  }
  for (const pid of parents.keys()) {
    let cmdline = "";
    try {
      cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    } catch {
      continue;
    }
    if (cmdline !== "/dev/airlock-relay\0--relay\0") continue;
    for (
      let up = parents.get(pid);
      up !== undefined && up > 1;
      up = parents.get(up)
    ) {
      if (up === process.pid) return pid;
    }
  }
  return undefined;
}

const events: NetConnectionEvent[] = [];
const onEvent = (message: unknown) =>
  events.push(message as NetConnectionEvent);
// Held: on Bun a subscription by name alone is lost at the next collection.
const channel = dc.channel(NET_CONNECTION_CHANNEL);
channel.subscribe(onEvent);
after(() => channel.unsubscribe(onEvent));

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return (server.address() as { port: number }).port;
}

/** A broker for `127.0.0.1:PORT` on the native relay. */
function broker(port: number) {
  const layout = netLayout([`127.0.0.1:${port}`]);
  if ("problem" in layout) throw new Error(layout.problem);
  return startNetBroker({
    module: "net_relay_test",
    layout,
    relay: netRelay(detect(), bwrap),
  });
}

describe(
  "the native relay, from a hostile sandbox",
  needs("bwrap", "python3"),
  () => {
    test("takes one handover of exactly its listeners, then relays 4 MiB both ways with a half-close", async () => {
      const server = createServer((socket) => {
        socket.on("error", () => {});
        socket.pipe(socket);
      });
      const port = await listen(server);
      const net = broker(port);
      await within(net.listening, 30_000, "the relay listens");
      const side = sandbox(net.socket, "echo", port);
      try {
        await within(net.ready, 30_000, "the handover");
        await until(
          () => side.lines.some((l) => l.startsWith("echo")),
          60_000,
          "the echo",
        );
        assert.ok(
          side.lines.some((l) => l.startsWith("second handover refused")),
          side.lines.join("\n"),
        );
        assert.ok(
          side.lines.includes(`echo same ${4 * 2 ** 20}`),
          side.lines.join("\n"),
        );
        await until(
          () => events.some((e) => e.bytesIn > 0),
          10_000,
          "the event",
        );
        const event = events.find((e) => e.bytesIn > 0);
        assert.equal(event?.address, "127.0.0.1");
        assert.equal(event?.bytesOut, 4 * 2 ** 20);
        assert.equal(event?.bytesIn, 4 * 2 ** 20);
        assert.equal(event?.error, undefined);
      } finally {
        await side.stop();
        net.close();
        await new Promise((resolve) => server.close(resolve));
      }
    });

    for (const mode of ["garbage", "wrong-port", "connected", "udp", "extra"]) {
      test(`refuses a handover of ${mode}, closing what it was given`, async () => {
        const port = 40_000 + Math.floor(Math.random() * 20_000);
        const net = broker(port);
        await within(net.listening, 30_000, "the relay listens");
        const side = sandbox(net.socket, mode, port);
        try {
          const error = await within(
            net.ready.then(() => undefined, (e: Error) => e),
            30_000,
            "the refusal",
          );
          assert.match(
            String(error?.message),
            /something other than its listening sockets/,
          );
          await until(() => side.lines.length > 0, 30_000, "the second try");
          assert.match(side.lines[0] ?? "", /^second handover refused/);
          // Nothing it handed over is still open in the relay.
          const relay = relayPid();
          assert.ok(relay !== undefined, "the relay runs");
          // Past stdin, stdout, stderr (sockets on Bun) and the epoll instance.
          const held = readdirSync(`/proc/${relay}/fd`).filter((fd) =>
            Number(fd) > 3
          );
          assert.deepEqual(held, []);
        } finally {
          await side.stop();
          net.close();
        }
      });
    }

    test("refuses connections past 256 open at once, each with an event", async () => {
      const sockets = new Set<Socket>();
      const server = createServer((socket) => {
        sockets.add(socket);
        socket.on("error", () => {});
        socket.on("close", () => sockets.delete(socket));
      });
      const port = await listen(server);
      const before = events.length;
      const net = broker(port);
      await within(net.listening, 30_000, "the relay listens");
      const side = sandbox(net.socket, "flood", port);
      try {
        await within(net.ready, 30_000, "the handover");
        await until(
          () => sockets.size >= 256,
          60_000,
          "256 connections relayed",
        );
        await until(
          () =>
            events.slice(before).filter((e) =>
              /more than 256/.test(e.refused ?? "")
            ).length >= 44,
          30_000,
          "44 refusals",
        );
        assert.equal(sockets.size, 256);
      } finally {
        await side.stop();
        net.close();
        for (const socket of sockets) socket.destroy();
        await new Promise((resolve) => server.close(resolve));
      }
    });

    test("a relay that dies fails its workers closed, and the next worker gets a new one", async () => {
      const server = createServer((socket) => {
        socket.on("error", () => {});
        socket.pipe(socket);
      });
      const port = await listen(server);
      const first = broker(port);
      await within(first.listening, 30_000, "the relay listens");
      const side = sandbox(first.socket, "later", port);
      let second: ReturnType<typeof broker> | undefined;
      try {
        await within(first.ready, 30_000, "the handover");
        await until(() => side.lines.includes("waiting"), 30_000, "the client");
        const dead = relayPid();
        assert.ok(dead !== undefined, "the relay runs");
        process.kill(dead, "SIGKILL");
        await until(() => relayPid() === undefined, 30_000, "the relay gone");
        // Its listening sockets went with it: the sandbox's connection is
        // refused, not carried anywhere.
        side.say("go");
        await until(
          () => side.lines.some((l) => l.startsWith("later")),
          30_000,
          "the late connection",
        );
        assert.match(side.lines.at(-1) ?? "", /^later refused 111$/);
        second = broker(port);
        await within(second.listening, 30_000, "a new relay listens");
        assert.notEqual(relayPid(), dead);
      } finally {
        await side.stop();
        first.close();
        second?.close();
        await new Promise((resolve) => server.close(resolve));
      }
    });

    test("holds a server back when the client never reads, in a few MiB", async () => {
      const big = new Uint8Array(64 * 1024);
      let written = 0;
      const sockets = new Set<Socket>();
      const server = createServer((socket) => {
        sockets.add(socket);
        socket.on("error", () => {});
        const pump = () => {
          while (!socket.destroyed && socket.write(big)) {
            written += big.byteLength;
          }
        };
        socket.on("drain", () => {
          written += big.byteLength;
          pump();
        });
        pump();
      });
      const port = await listen(server);
      const net = broker(port);
      await within(net.listening, 30_000, "the relay listens");
      const side = sandbox(net.socket, "stall", port);
      try {
        await within(net.ready, 30_000, "the handover");
        await until(
          () => sockets.size === 1 && written > 0,
          30_000,
          "the stream",
        );
        // Until it stops moving: then everything held is in socket buffers and pipes.
        let last = -1;
        await until(
          async () => {
            await new Promise((resolve) => setTimeout(resolve, 500));
            const still = written === last;
            last = written;
            return still;
          },
          60_000,
          "the server held back",
        );
        assert.ok(written < 64 * 2 ** 20, `the server wrote ${written} bytes`);
        const relay = relayPid();
        assert.ok(relay !== undefined, "the relay runs");
        const rss = Number(
          /VmRSS:\s+(\d+) kB/.exec(
            readFileSync(`/proc/${relay}/status`, "utf8"),
          )?.[1],
        );
        assert.ok(rss < 16 * 1024, `the relay holds ${rss} KiB`);
        // Its own seccomp filter: no open, no exec, sockets of three families.
        assert.match(
          readFileSync(`/proc/${relay}/status`, "utf8"),
          /^Seccomp:\s+2$/m,
        );
      } finally {
        await side.stop();
        net.close();
        for (const socket of sockets) socket.destroy();
        await new Promise((resolve) => server.close(resolve));
      }
    });
  },
);
