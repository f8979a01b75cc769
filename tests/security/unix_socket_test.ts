// Filesystem unix sockets reach the host (issue 14 item 7): in 0.1 a Bun
// worker with nothing granted connected to a host process listening on a
// unix socket in its project directory, and one granted only read on a
// directory to a socket in it. The seccomp filter refuses socket(AF_UNIX)
// unless net is true, from JavaScript and from native code alike. Runs with
// bubblewrap and Landlock, and (second CI pass) with Landlock alone.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { session } from "../../mod.ts";
import type confine from "../fixtures/security/confine_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool, needsSandbox } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("security/confine_worker.ts");
const dir = scratchDir("unix-socket");
const socketPath = dir.join("host.sock");
let server: Server;
let accepted = 0;

before(async () => {
  server = createServer((socket) => {
    accepted++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
});

after(async () => {
  await new Promise((resolve) => server.close(resolve));
  dir[Symbol.dispose]();
});

/** The options of a worker of this runtime, confined by the OS sandbox. */
function options(permissions: Record<string, unknown>) {
  return {
    ...captureLog(),
    sandbox: "os" as const,
    // Deno's flags would refuse first: ffi lets native code try for real.
    permissions: RUNTIME === "deno"
      ? { ...permissions, ffi: true }
      : permissions,
  };
}

describe("unix sockets", needsSandbox(), () => {
  test("a worker with nothing granted cannot connect to a host unix socket", async () => {
    await using s = await session<typeof confine>(worker, options({}));
    const before = accepted;
    assert.notEqual(await s.unixConnect(socketPath), "ok");
    assert.notEqual(await s.nativeUnixConnect(socketPath), "ok");
    assert.equal(accepted, before);
  });

  test("a worker granted read on the socket's directory cannot connect to it", async () => {
    await using s = await session<typeof confine>(
      worker,
      options({ read: [dir.path] }),
    );
    const before = accepted;
    assert.notEqual(await s.unixConnect(socketPath), "ok");
    // Native code gets no unix socket at all: socket(2) fails with EPERM.
    assert.equal(await s.nativeUnixConnect(socketPath), "socket errno 1");
    assert.equal(accepted, before);
  });

  test("a worker granted net scopes (TCP ports) still cannot connect to a unix socket", async () => {
    await using s = await session<typeof confine>(
      worker,
      // Without bubblewrap a host scope is held by port only, which strict
      // permissions refuse (tests/security/net_host_test.ts).
      options({
        read: [dir.path],
        net: ["127.0.0.1:9"],
        ...(hasTool("bwrap") ? {} : { enforce: "best-effort" }),
      }),
    );
    assert.equal(await s.nativeUnixConnect(socketPath), "socket errno 1");
  });

  test("a worker granted net: true connects (the filter's control)", async () => {
    await using s = await session<typeof confine>(
      worker,
      options({ read: [dir.path], net: true }),
    );
    const before = accepted;
    assert.equal(await s.nativeUnixConnect(socketPath), "ok");
    // The server's accept reaches this loop after the worker's connect
    // returned: wait for it, under load too.
    await until(() => accepted === before + 1, 30_000, "the connection");
  });
});
