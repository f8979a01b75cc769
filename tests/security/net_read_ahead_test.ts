// A worker that opens many connections through its broker to a granted
// server that streams, and then stops reading, must not grow the parent
// without a small bound per connection. On Bun the relay read up to 8
// chunks ahead of a blocked writer, and Bun's chunks reach 512 KiB: 120
// such connections grew the parent by about 620 to 690 MiB (Deno: 48 MiB).
// The read-ahead of the whole process is now bounded too (64 MiB, past
// which each socket pauses after every chunk): about 260 MiB on Bun, the
// rest being each stalled connection's one chunk in its writer.
// The client is a separate process (python3) with a small receive buffer
// that never reads, as a hostile worker's native code would.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer, type Socket } from "node:net";
import process from "node:process";
import { netLayout } from "../../src/runtime/sandbox/net/targets.ts";
import { startNetBroker } from "../../src/runtime/sandbox/net/broker.ts";
import { needs } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

const CONNECTIONS = 120;
/** The parent's growth allowed for all of them (about 260 MiB after the fix, 620 before). */
const BOUND_MIB = 400;

describe("net broker: a worker that stops reading", needs("python3"), () => {
  test(`${CONNECTIONS} stalled connections hold less than ${BOUND_MIB} MiB of the parent`, async () => {
    const big = new Uint8Array(64 * 1024);
    const sockets = new Set<Socket>();
    const server = createServer((socket) => {
      sockets.add(socket);
      socket.on("error", () => {});
      socket.on("close", () => sockets.delete(socket));
      const pump = () => {
        while (!socket.destroyed && socket.write(big)) {
          // Until the kernel and the relay push back.
        }
      };
      socket.on("drain", pump);
      pump();
    });
    await new Promise<void>((resolve) =>
      server.listen(0, "127.0.0.1", resolve)
    );
    const port = (server.address() as { port: number }).port;
    const layout = netLayout([`localhost:${port}`]);
    if ("problem" in layout) throw new Error(layout.problem);
    const broker = startNetBroker({
      module: "net_read_ahead_test",
      layout,
      lookup: () => Promise.resolve([{ address: "127.0.0.1", family: 4 }]),
    });
    const client = spawn("python3", [
      "-c",
      `import socket, sys
ss = []
for i in range(${CONNECTIONS}):
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(sys.argv[1])
    s.sendall(b"localhost:${port}\\n")
    ss.append(s)
sys.stdin.read()`,
      broker.socket,
    ], { stdio: ["pipe", "ignore", "inherit"] });
    try {
      await broker.listening;
      const before = process.memoryUsage().rss;
      await until(
        () => sockets.size >= CONNECTIONS,
        60_000,
        "every connection relayed to the server",
      );
      // Watch the parent while the relays fill up and stall.
      let most = 0;
      const watched = Date.now();
      await until(
        () => {
          most = Math.max(most, process.memoryUsage().rss - before);
          return Date.now() - watched > 5_000;
        },
        30_000,
        "the watch",
      );
      const mib = Math.round(most / 2 ** 20);
      assert.ok(mib < BOUND_MIB, `the parent grew ${mib} MiB`);
    } finally {
      client.stdin?.end();
      client.kill();
      broker.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
