// Confinement by Landlock and seccomp (issue 19), which also holds where
// bubblewrap cannot run: the second CI pass runs this file with bubblewrap
// made unusable. A Bun and a Deno worker granted only a directory cannot
// read, write or natively open anything outside it, cannot signal the
// parent, and cannot reach a TCP port that is not granted.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import process from "node:process";
import { session } from "../../mod.ts";
import { buildWorkerCommand } from "../../src/runtime/launch/command.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { detect } from "../../src/runtime/detect.ts";
import type confine from "../fixtures/security/confine_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool, needs } from "../_helpers/tools.ts";

checkNoLeaks();

const worker = fixture("security/confine_worker.ts");
const root = scratchDir("landlock");
const granted = root.join("granted");
const outside = root.join("outside");
const servers: Server[] = [];
const ports: number[] = [];

before(async () => {
  mkdirSync(granted);
  mkdirSync(outside);
  writeFileSync(root.join("granted", "in.txt"), "inside");
  writeFileSync(root.join("outside", "secret.txt"), "secret");
  for (let index = 0; index < 2; index++) {
    const server = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) =>
      server.listen(0, "127.0.0.1", resolve)
    );
    servers.push(server);
    ports.push((server.address() as { port: number }).port);
  }
});

after(async () => {
  for (const server of servers) {
    await new Promise((resolve) => server.close(resolve));
  }
  root[Symbol.dispose]();
});

/** A worker of this runtime granted `permissions`, in the OS sandbox. */
function confined(permissions: Record<string, unknown>) {
  return session<typeof confine>(worker, {
    ...captureLog(),
    sandbox: "os",
    // Deno's flags would refuse first: ffi lets native code try for real.
    permissions: RUNTIME === "deno"
      ? { ...permissions, ffi: true }
      : permissions,
  });
}

describe("Landlock confinement", needs("landlock"), () => {
  test("Landlock confines every sandboxed worker, inside bubblewrap or alone", () => {
    const command = buildWorkerCommand({
      moduleUrl: worker,
      label: "confine_worker.ts",
      runtime: RUNTIME,
      permissions: resolvePermissions({ read: [granted] }, granted),
      sandbox: "os",
      env: {},
      cwd: granted,
      config: undefined,
      command: undefined,
      launcher: undefined,
    }, detect());
    assert.deepEqual(
      command.sandboxes,
      hasTool("bwrap") ? ["bwrap", "landlock"] : ["landlock"],
    );
  });

  // Any launcher means the worker runs elsewhere, outside the OS sandbox:
  // an empty prefix must mean none, never an unsandboxed local worker.
  test("an empty launcher is none: the worker runs here, confined", async () => {
    await using s = await session<typeof confine>(worker, {
      ...captureLog(),
      sandbox: "os",
      launcher: [],
      permissions: { read: [granted] },
    });
    assert.deepEqual(
      s.stats().sandboxes,
      hasTool("bwrap") ? ["bwrap", "landlock"] : ["landlock"],
    );
  });

  test("a worker granted only a directory reads, writes and opens it, and nothing outside", async () => {
    await using s = await confined({ read: [granted], write: [granted] });
    assert.equal(await s.read(root.join("granted", "in.txt")), "ok");
    assert.equal(await s.write(root.join("granted", "new.txt")), "ok");
    assert.equal(await s.nativeOpen(root.join("granted", "in.txt")), "ok");
    const secret = root.join("outside", "secret.txt");
    assert.notEqual(await s.read(secret), "ok");
    assert.notEqual(await s.write(root.join("outside", "planted.txt")), "ok");
    assert.notEqual(await s.nativeOpen(secret), "ok");
    assert.notEqual(await s.nativeOpen("/etc/shadow"), "ok");
    assert.notEqual(await s.nativeOpen(process.env.HOME ?? "/root"), "ok");
  });

  test("a symlink planted in the grant does not lead out of it", async () => {
    // Another worker sharing the directory planted it; Deno's flags see a
    // path inside the grant, the kernel checks where it really leads.
    symlinkSync(outside, root.join("granted", "escape"));
    await using s = await confined({ read: [granted], write: [granted] });
    const through = root.join("granted", "escape", "secret.txt");
    assert.notEqual(await s.read(through), "ok");
    assert.notEqual(await s.nativeOpen(through), "ok");
    assert.notEqual(
      await s.write(root.join("granted", "escape", "planted.txt")),
      "ok",
    );
  });

  test("a worker granted only a directory cannot read its parent's environment or command line", async () => {
    await using s = await confined({ read: [granted] });
    for (const name of ["environ", "cmdline", "maps"]) {
      const path = `/proc/${process.pid}/${name}`;
      assert.notEqual(await s.read(path), "ok", name);
      assert.notEqual(await s.nativeOpen(path), "ok", name);
    }
    assert.equal(
      await s.nativeOpen("/proc/self/status"),
      "ok",
      "its own /proc",
    );
  });

  test("a worker granted only a directory cannot signal its parent", async () => {
    await using s = await confined({ read: [granted] });
    assert.notEqual(await s.signal(process.pid, 0), "ok");
  });

  test("a worker without net reaches no TCP port", async () => {
    await using s = await confined({ read: [granted] });
    assert.notEqual(await s.tcpConnect(ports[0] as number), "ok");
  });

  test("a worker granted one TCP port reaches it and no other", async () => {
    const [open, closed] = ports as [number, number];
    // Without bubblewrap Landlock holds the port on any host, which strict
    // permissions refuse for a host scope (tests/security/net_host_test.ts).
    await using s = await confined({
      net: [`127.0.0.1:${open}`],
      ...(hasTool("bwrap") ? {} : { enforce: "best-effort" }),
    });
    assert.equal(await s.tcpConnect(open), "ok");
    assert.notEqual(await s.tcpConnect(closed), "ok");
  });
});
