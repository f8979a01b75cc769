// The network broker (parent side) and the forwarder (a process of its own)
// outside any sandbox: the forwarder listens on a loopback address per
// granted target and carries each connection over the broker's unix socket;
// the broker alone decides what is reached, and says so on its diagnostics
// channel. The sandboxed end to end tests are tests/security/net_host_test.ts.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import dc from "node:diagnostics_channel";
import { connect, createServer, type Server, type Socket } from "node:net";
import process from "node:process";
import {
  addressClass,
  netLayout,
  parseNetTarget,
  sandboxLocalAddresses,
} from "../../src/runtime/sandbox/net/targets.ts";
import {
  MAX_CONCURRENT_LOOKUPS,
  NET_CONNECTION_CHANNEL,
  type NetConnectionEvent,
  startNetBroker,
} from "../../src/runtime/sandbox/net/broker.ts";
import {
  forwarderCommand,
  netStepCapabilities,
} from "../../src/runtime/sandbox/net/sandbox_net.ts";
import { loopbackAddressRequest } from "../../src/runtime/sandbox/net/loopback_request.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { until, within } from "../_helpers/wait.ts";

checkNoLeaks();

describe("netLayout() and addressClass()", () => {
  test("classes addresses the broker may not reach by name", () => {
    const table: [string, string][] = [
      ["127.0.0.1", "loopback"],
      ["127.80.0.1", "loopback"],
      ["::1", "loopback"],
      ["::ffff:127.0.0.1", "loopback"],
      ["169.254.169.254", "link-local"],
      ["::ffff:169.254.169.254", "link-local"],
      ["fe80::1", "link-local"],
      ["10.0.0.5", "private"],
      ["172.16.0.1", "private"],
      ["192.168.1.1", "private"],
      ["100.64.0.1", "private"],
      ["fd12::1", "private"],
      ["0.0.0.0", "unspecified"],
      ["::", "unspecified"],
      ["224.0.0.1", "multicast"],
      ["ff02::1", "multicast"],
      ["255.255.255.255", "reserved"],
      ["not an address", "reserved"],
      ["93.184.215.14", "public"],
      ["2606:4700::1111", "public"],
    ];
    for (const [address, expected] of table) {
      assert.equal(addressClass(address), expected, address);
    }
  });

  test("maps names to loopback addresses of their own, literals as they are", () => {
    const layout = netLayout([
      "db.internal:5432",
      "DB.internal:6432",
      "127.80.0.1:9000",
      "localhost:6379",
      "[::1]:7000",
      "db.internal:5432",
    ]);
    assert.ok("listeners" in layout);
    assert.deepEqual(
      layout.listeners.map((l) => `${l.target} ${l.address} ${l.port}`),
      [
        "db.internal:5432 127.80.0.2 5432",
        "DB.internal:6432 127.80.0.2 6432",
        "127.80.0.1:9000 127.80.0.1 9000",
        "localhost:6379 127.0.0.1 6379",
        "localhost:6379 ::1 6379",
        "[::1]:7000 ::1 7000",
      ],
    );
    assert.equal(
      layout.hosts,
      "127.0.0.1 localhost\n::1 localhost\n127.80.0.2 db.internal\n",
    );
  });

  test("refuses what it cannot enforce by host and port, naming the fix", () => {
    for (
      const [scope, reason] of [
        ["example.com", /names no port/],
        [":5432", /every host/],
        ["*.example.com:443", /wildcard/],
        ["224.0.0.1:80", /multicast address, not one host/],
        ["0.0.0.0:80", /unspecified address/],
        ["[fe80::1]:80", /IPv6 link-local/],
        ["[::ffff:10.0.0.5]:80", /IPv4 address written as IPv6/],
        ["db:0", /port from 1/],
      ] as const
    ) {
      const layout = netLayout([scope]);
      assert.ok("problem" in layout, scope);
      assert.match(layout.problem, reason);
    }
    assert.deepEqual(parseNetTarget("[::1]:80"), {
      scope: "[::1]:80",
      host: "::1",
      port: 80,
      kind: "ipv6",
    });
  });

  test("an address outside loopback is listened on as it is, added to the sandbox's loopback first", () => {
    const layout = netLayout([
      "10.0.0.5:5432",
      "10.0.0.5:6432",
      "169.254.169.254:80",
      "[2001:db8::7]:443",
      "127.0.0.2:9000",
      "db:5432",
    ]);
    assert.ok("listeners" in layout);
    assert.deepEqual(
      layout.listeners.map((l) => `${l.address} ${l.port}`),
      [
        "10.0.0.5 5432",
        "10.0.0.5 6432",
        "169.254.169.254 80",
        "2001:db8::7 443",
        "127.0.0.2 9000",
        "127.80.0.1 5432",
      ],
    );
    assert.deepEqual(sandboxLocalAddresses(layout), [
      "10.0.0.5",
      "169.254.169.254",
      "2001:db8::7",
    ]);
    assert.deepEqual(netStepCapabilities(layout), [
      "CAP_NET_BIND_SERVICE",
      "CAP_NET_ADMIN",
    ]);
    const one = netLayout(["10.0.0.5:5432"]);
    assert.ok("listeners" in one);
    assert.deepEqual(netStepCapabilities(one), ["CAP_NET_ADMIN"]);
    const names = netLayout(["db:5432", "localhost:80"]);
    assert.ok("listeners" in names);
    assert.deepEqual(sandboxLocalAddresses(names), []);
    assert.deepEqual(netStepCapabilities(names), ["CAP_NET_BIND_SERVICE"]);
  });

  test("loopbackAddressRequest() is the RTM_NEWADDR message the native step sends too", () => {
    const v4 = loopbackAddressRequest(new Uint8Array([10, 0, 0, 5]));
    // nlmsghdr: length 40, RTM_NEWADDR, REQUEST|ACK|EXCL|CREATE, seq 1.
    assert.deepEqual(
      [...v4.subarray(0, 12)],
      [40, 0, 0, 0, 20, 0, 0x05, 0x06, 1, 0, 0, 0],
    );
    // ifaddrmsg: AF_INET, /32, NODAD, host scope, loopback (index 1);
    // then IFA_LOCAL and IFA_ADDRESS with the address.
    assert.deepEqual(
      [...v4.subarray(16)],
      [
        2,
        32,
        2,
        254,
        1,
        0,
        0,
        0,
        8,
        0,
        2,
        0,
        10,
        0,
        0,
        5,
        8,
        0,
        1,
        0,
        10,
        0,
        0,
        5,
      ],
    );
    const v6 = loopbackAddressRequest(new Uint8Array(16).fill(0xfd, 0, 1));
    assert.equal(v6.byteLength, 64);
    assert.deepEqual([...v6.subarray(16, 18)], [10, 128]);
    assert.throws(() => loopbackAddressRequest(new Uint8Array(5)), RangeError);
  });
});

describe("the broker and the forwarder", () => {
  let echo: Server;
  let echoPort = 0;
  let trap: Server;
  let trapPort = 0;
  let trapped = 0;
  const events: NetConnectionEvent[] = [];
  // Held here: Bun keeps a channel only while something refers to it, and
  // a subscription made by name is lost with it at the next collection.
  const channel = dc.channel(NET_CONNECTION_CHANNEL);
  const onEvent = (message: unknown) => {
    events.push(message as NetConnectionEvent);
  };

  before(async () => {
    echo = createServer(
      { allowHalfOpen: true },
      (socket) => socket.pipe(socket),
    );
    trap = createServer((socket) => {
      trapped++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => echo.listen(0, "127.0.0.1", resolve));
    await new Promise<void>((resolve) => trap.listen(0, "127.0.0.1", resolve));
    echoPort = (echo.address() as { port: number }).port;
    trapPort = (trap.address() as { port: number }).port;
    channel.subscribe(onEvent);
  });

  after(async () => {
    channel.unsubscribe(onEvent);
    await new Promise((resolve) => echo.close(resolve));
    await new Promise((resolve) => trap.close(resolve));
  });

  /**
   * A broker for `scopes` and a forwarder process in front of it, listening
   * on the host's loopback at `127.80.0.<first + index>` for each scope (outside
   * a sandbox the sandbox's own addresses would clash with the host's).
   */
  async function start(
    scopes: string[],
    lookup: (
      host: string,
    ) =>
      | { address: string; family: number }[]
      | Promise<{ address: string; family: number }[]>,
    first = 50,
  ) {
    const layout = netLayout(scopes);
    if ("problem" in layout) throw new Error(layout.problem);
    const broker = startNetBroker({
      module: "net_broker_test",
      layout,
      lookup: (host) => Promise.resolve(lookup(host)),
    });
    await broker.listening;
    const listeners = layout.targets.map((target, index) => ({
      address: `127.80.0.${first + index}`,
      port: target.port,
      target: target.scope,
    }));
    const forwarder = new URL(
      "../../src/runtime/sandbox/net/forwarder.ts",
      import.meta.url,
    ).pathname;
    const spec = JSON.stringify({ socket: broker.socket, listeners });
    const argv = RUNTIME === "deno"
      ? ["run", "-A", "--quiet", "--no-config", "--no-lock", forwarder, spec]
      : ["--no-env-file", forwarder, spec];
    const child = spawn(process.execPath, argv, {
      stdio: ["ignore", "ignore", "inherit"],
    });
    broker.setPid(child.pid);
    await within(broker.ready, 30_000, "the forwarder's ready");
    return {
      broker,
      listeners,
      async [Symbol.asyncDispose]() {
        const exited = child.exitCode !== null
          ? Promise.resolve()
          : new Promise((resolve) => child.once("exit", resolve));
        broker.close();
        await within(exited, 10_000, "the forwarder's exit");
      },
    };
  }

  /** Sends `bytes`, half-closes, and reads until the peer closes. */
  /**
   * Sends `bytes`, half-closes, and collects what comes back until the
   * end. With `refused`, a reset also ends it: a relay that closes a refused
   * connection before reading what the client sent makes the kernel reset it
   * (Bun's sockets, at times).
   */
  function exchange(
    host: string,
    port: number,
    bytes: Uint8Array,
    refused = false,
  ) {
    return new Promise<Uint8Array>((resolve, reject) => {
      const socket: Socket = connect({ host, port, allowHalfOpen: true });
      const chunks: Uint8Array[] = [];
      socket.on("data", (chunk: Uint8Array) => chunks.push(chunk));
      socket.on("error", (error: { code?: string }) => {
        if (!refused || error.code !== "ECONNRESET") reject(error);
      });
      socket.on("connect", () => socket.end(bytes));
      socket.on("close", () => {
        const all = new Uint8Array(
          chunks.reduce((sum, chunk) => sum + chunk.byteLength, 0),
        );
        let offset = 0;
        for (const chunk of chunks) {
          all.set(chunk, offset);
          offset += chunk.byteLength;
        }
        resolve(all);
      });
    });
  }

  async function eventFor(target: string): Promise<NetConnectionEvent> {
    await until(
      () => events.some((e) => e.target === target),
      10_000,
      `the event of "${target}"`,
    );
    return events.find((e) => e.target === target) as NetConnectionEvent;
  }

  test("relays 4 MiB both ways with a half-close and publishes the connection", async () => {
    await using net = await start(
      [`localhost:${echoPort}`],
      () => [{ address: "127.0.0.1", family: 4 }],
    );
    const [listener] = net.listeners;
    assert.ok(listener);
    const bytes = new Uint8Array(4 * 2 ** 20).map((_, i) => i * 7);
    const back = await within(
      exchange(listener.address, listener.port, bytes),
      30_000,
      "the echo",
    );
    assert.equal(back.byteLength, bytes.byteLength);
    // Every byte in place: a relay that reused a buffer too early would
    // deliver some chunk twice.
    let wrong = 0;
    for (let i = 0; i < bytes.byteLength; i++) {
      if (back[i] !== bytes[i]) wrong++;
    }
    assert.equal(wrong, 0, "bytes echoed differently");
    const event = await eventFor(`localhost:${echoPort}`);
    assert.equal(event.refused, undefined);
    assert.equal(event.error, undefined);
    assert.equal(event.host, "localhost");
    assert.equal(event.port, echoPort);
    assert.equal(event.address, "127.0.0.1");
    assert.equal(event.bytesOut, bytes.byteLength);
    assert.equal(event.bytesIn, bytes.byteLength);
    assert.equal(event.module, "net_broker_test");
    assert.equal(typeof event.pid, "number");
    assert.ok(event.durationMs >= 0);
  });

  test("refuses a granted name that resolves to link-local or loopback, connecting nowhere", async () => {
    await using net = await start(
      [`metadata.test:${trapPort}`, `loop.test:${trapPort}`],
      (host) =>
        host === "metadata.test"
          ? [{ address: "169.254.169.254", family: 4 }]
          : [{ address: "127.0.0.1", family: 4 }, {
            address: "::1",
            family: 6,
          }],
    );
    for (const listener of net.listeners) {
      const back = await within(
        exchange(
          listener.address,
          listener.port,
          new Uint8Array([1, 2, 3]),
          true,
        ),
        10_000,
        "the refused connection's end",
      );
      assert.equal(back.byteLength, 0);
    }
    const metadata = await eventFor(`metadata.test:${trapPort}`);
    assert.match(metadata.refused ?? "", /169\.254\.169\.254 \(link-local\)/);
    assert.equal(metadata.address, undefined);
    const loop = await eventFor(`loop.test:${trapPort}`);
    assert.match(
      loop.refused ?? "",
      /127\.0\.0\.1 \(loopback\), ::1 \(loopback\)/,
    );
    assert.equal(trapped, 0);
  });

  test("refuses a target the worker was not granted, whatever the forwarder says", async () => {
    await using net = await start(
      [`localhost:${echoPort}`],
      () => [{ address: "127.0.0.1", family: 4 }],
    );
    // A tampered forwarder: straight to the broker's socket, naming another port.
    const named = `127.0.0.1:${trapPort}`;
    await within(
      new Promise<void>((resolve, reject) => {
        const socket = connect({ path: net.broker.socket });
        socket.on("error", reject);
        socket.on("close", () => resolve());
        socket.on("data", () => {});
        socket.write(`${named}\nGET / HTTP/1.0\r\n\r\n`);
      }),
      10_000,
      "the broker's refusal",
    );
    const event = await eventFor(named);
    assert.match(event.refused ?? "", /not one of the worker's net grants/);
    assert.equal(trapped, 0);
  });

  test("refuses a first line longer than 512 bytes, connecting nowhere", async () => {
    await using net = await start(
      [`localhost:${echoPort}`],
      () => [{ address: "127.0.0.1", family: 4 }],
    );
    await within(
      new Promise<void>((resolve, reject) => {
        const socket = connect({ path: net.broker.socket });
        socket.on("error", reject);
        socket.on("close", () => resolve());
        socket.on("data", () => {});
        socket.write("x".repeat(600));
      }),
      10_000,
      "the broker's refusal",
    );
    await until(
      () =>
        events.some((e) => /sent more than 512 bytes/.test(e.refused ?? "")),
      10_000,
      "the refusal's event",
    );
    assert.equal(trapped, 0);
  });

  test("refuses a connection past 256 open at once", async () => {
    await using net = await start(
      [`localhost:${echoPort}`],
      () => [{ address: "127.0.0.1", family: 4 }],
    );
    const sockets: Socket[] = [];
    try {
      // Each names no target yet: the broker holds it (10 s at most).
      for (let i = 0; i < 258; i++) {
        const socket = connect({ path: net.broker.socket });
        socket.on("error", () => {});
        sockets.push(socket);
      }
      await until(
        () =>
          events.some((e) => /more than 256 connections/.test(e.refused ?? "")),
        10_000,
        "the refusal past the limit",
      );
    } finally {
      for (const socket of sockets) socket.destroy();
    }
  });

  test("resolves at most MAX_CONCURRENT_LOOKUPS names at once, one lookup per name at a time", async () => {
    let running = 0;
    let most = 0;
    const asked: string[] = [];
    // Each lookup takes 100 ms: the 40 connections over 8 brokers' names
    // would hold 40 resolver threads at once without the bound.
    const slow = async (host: string) => {
      asked.push(host);
      running++;
      most = Math.max(most, running);
      await new Promise((resolve) => setTimeout(resolve, 100));
      running--;
      return [{ address: "127.0.0.1", family: 4 }];
    };
    const nets = [];
    try {
      for (let i = 0; i < 8; i++) {
        nets.push(await start([`localhost:${echoPort}`], slow, 100 + i));
      }
      const before = events.length;
      const bytes = new TextEncoder().encode("ping");
      const echoes = nets.flatMap((net) =>
        Array.from({ length: 5 }, () => {
          const [listener] = net.listeners;
          assert.ok(listener);
          return exchange(listener.address, listener.port, bytes);
        })
      );
      const back = await within(Promise.all(echoes), 30_000, "40 echoes");
      for (const answer of back) assert.deepEqual(answer, bytes);
      await until(
        () => events.length - before >= 40,
        10_000,
        "the 40 connections' events",
      );
      const mine = events.slice(before);
      assert.equal(mine.filter((e) => e.refused !== undefined).length, 0);
      assert.ok(
        most <= MAX_CONCURRENT_LOOKUPS,
        `${most} lookups ran at once (at most ${MAX_CONCURRENT_LOOKUPS})`,
      );
      assert.ok(
        asked.length < 40,
        `${asked.length} lookups for 40 connections: one per name at a time`,
      );
    } finally {
      for (const net of nets) await net[Symbol.asyncDispose]();
    }
  });

  test("holds a client back when the server stops reading: backpressure through both relays", async () => {
    // A server that accepts and never reads.
    const held: Socket[] = [];
    const sink = createServer((socket) => {
      socket.pause();
      held.push(socket);
    });
    await new Promise<void>((resolve) => sink.listen(0, "127.0.0.1", resolve));
    const sinkPort = (sink.address() as { port: number }).port;
    try {
      await using net = await start(
        [`localhost:${sinkPort}`],
        () => [{ address: "127.0.0.1", family: 4 }],
      );
      const [listener] = net.listeners;
      assert.ok(listener);
      const socket = connect({ host: listener.address, port: listener.port });
      socket.on("error", () => {});
      await new Promise((resolve) => socket.once("connect", resolve));
      const chunk = new Uint8Array(256 * 1024);
      let sent = 0;
      let stalledSince = Date.now();
      // Write while the socket takes it; stop once it has not drained for 2 s.
      while (Date.now() - stalledSince < 2_000 && sent < 1024 * 2 ** 20) {
        if (socket.write(chunk)) {
          sent += chunk.byteLength;
          stalledSince = Date.now();
          continue;
        }
        sent += chunk.byteLength;
        const drained = await Promise.race([
          new Promise<boolean>((resolve) =>
            socket.once("drain", () => resolve(true))
          ),
          new Promise<boolean>((resolve) =>
            setTimeout(() => resolve(false), 2_000)
          ),
        ]);
        if (drained) stalledSince = Date.now();
      }
      socket.destroy();
      // Kernel buffers of three sockets and a few chunks per relay: far
      // below what was offered (1 GiB).
      assert.ok(
        sent < 96 * 2 ** 20,
        `${(sent / 2 ** 20).toFixed(0)} MiB went in before the client was held`,
      );
    } finally {
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => sink.close(resolve));
    }
  });
});

describe("forwarderCommand()", () => {
  test("a Bun forwarder reads and writes no transpiler cache, as the confine step", () => {
    const layout = netLayout(["db.internal:5432"]);
    assert.ok("listeners" in layout);
    const bun = forwarderCommand(
      { runtime: "bun", binary: "/usr/bin/bun" },
      layout,
      undefined,
    );
    assert.equal(bun.env.BUN_RUNTIME_TRANSPILER_CACHE_PATH, "0");
    assert.equal(bun.env.HOME, undefined, "nothing else of the parent's");
  });
});
