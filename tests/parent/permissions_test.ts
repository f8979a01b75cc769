import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { PermissionError, RemoteError, session } from "../../mod.ts";
import type permissions from "../fixtures/permissions_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsSandbox, needsWorkers } from "../_helpers/tools.ts";

checkNoLeaks();

const worker = fixture("permissions_worker.ts");
const root = mkdtempSync(join(tmpdir(), "airlock-perm-"));
const dirA = join(root, "A");
const dirB = join(root, "B");
mkdirSync(dirA);
mkdirSync(dirB);
writeFileSync(join(dirA, "a.txt"), "inside");
writeFileSync(join(dirB, "b.txt"), "outside");
let server: Server;
let port = 0;

before(async () => {
  server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  port = (server.address() as { port: number }).port;
});

after(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(root, { recursive: true, force: true });
});

/** Asserts a denial by class and by the runtime's own name or code. */
function assertDenied(error: unknown, what: string): void {
  assert.ok(error instanceof RemoteError, `${what}: ${error}`);
  if (RUNTIME === "deno" && error.name === "NotCapable") return;
  // Inside the OS sandbox the path, program or network does not exist.
  assert.ok(
    ["ENOENT", "EACCES", "EROFS", "EPERM", "ECONNREFUSED", "ENETUNREACH"]
      .includes(String(error.code)),
    `${what}: expected a denial, got ${error.name} ${
      String(error.code)
    }: ${error.message}`,
  );
}

describe("permissions", () => {
  test(
    "a worker scoped to A reads and writes A, and nothing else",
    needsWorkers(),
    async () => {
      await using s = await session<typeof permissions>(worker, {
        ...captureLog(),
        permissions: { read: [dirA], write: [dirA] },
        env: { GIVEN: "yes", HIDDEN_FROM_DENO: "x" },
      });
      assert.equal(await s.read(join(dirA, "a.txt")), "inside");
      assert.deepEqual(await s.list(dirA), ["a.txt"]);
      assert.equal(await s.write(join(dirA, "new.txt"), "x"), "written");
      assertDenied(await s.read(join(dirB, "b.txt")).catch((e) => e), "read B");
      assertDenied(await s.list(dirB).catch((e) => e), "list B");
      assertDenied(
        await s.write(join(dirB, "new.txt"), "x").catch((e) => e),
        "write B",
      );
      assertDenied(await s.connect(port).catch((e) => e), "connect");
      assertDenied(await s.run("/bin/sh").catch((e) => e), "run");
    },
  );

  test(
    "a variable given in env is readable without a grant; one not given is absent, never a throw",
    needsWorkers(),
    async () => {
      process.env.AIRLOCK_TEST_INHERITED = "inherited";
      try {
        await using s = await session<typeof permissions>(worker, {
          ...captureLog(),
          env: { GIVEN: "yes" },
          inheritEnv: ["AIRLOCK_TEST_INHERITED"],
        });
        assert.equal(await s.env("GIVEN"), "yes");
        assert.equal(await s.env("AIRLOCK_TEST_INHERITED"), "inherited");
        // Set in the parent, not given: absent, not NotCapable on Deno.
        assert.equal(await s.env("PATH"), undefined);
        // Added by airlock for Deno itself, not given: absent too.
        assert.equal(await s.env("DENO_DIR"), undefined);
        assert.equal(await s.env("NEVER_SET_ANYWHERE"), undefined);
        assert.deepEqual(
          // airlock sets NO_COLOR unless given; bubblewrap always sets PWD
          // (docs/permissions.md).
          (await s.envNames()).filter((name) => name !== "PWD"),
          ["AIRLOCK_TEST_INHERITED", "GIVEN", "NO_COLOR"],
        );
      } finally {
        delete process.env.AIRLOCK_TEST_INHERITED;
      }
    },
  );

  test(
    "an env grant for a variable not given reads as undefined",
    needsWorkers(),
    async () => {
      await using s = await session<typeof permissions>(worker, {
        ...captureLog(),
        permissions: { env: ["HOME"] },
        env: { GIVEN: "yes" },
      });
      assert.equal(await s.env("GIVEN"), "yes");
      assert.equal(await s.env("HOME"), undefined);
    },
  );

  test("what is granted works: net, run, env", needsWorkers(), async () => {
    await using s = await session<typeof permissions>(worker, {
      ...captureLog(),
      permissions: { net: true, run: true, env: true },
      env: { GIVEN: "yes" },
      inheritEnv: ["PATH"],
    });
    assert.equal(await s.connect(port), "connected");
    assert.equal(await s.run("/bin/sh"), "started");
    assert.equal(await s.env("GIVEN"), "yes");
  });

  test(
    "the OS sandbox confines native code: FFI open(2) outside A fails, inside works",
    needsSandbox(),
    async () => {
      await using s = await session<typeof permissions>(worker, {
        ...captureLog(),
        permissions: { read: [dirA], ffi: true },
      });
      assert.ok(await s.nativeOpen(join(dirA, "a.txt")) >= 0);
      assert.equal(await s.nativeOpen(join(dirB, "b.txt")), -1);
    },
  );

  test("without the OS sandbox the same FFI call escapes, which is what the sandbox is for", async () => {
    await using s = await session<typeof permissions>(worker, {
      ...captureLog(),
      sandbox: "none",
      permissions: { read: [dirA], ffi: true, enforce: "best-effort" },
    });
    assert.ok(await s.nativeOpen(join(dirB, "b.txt")) >= 0);
  });

  test("permissions that nothing can enforce fail with PermissionError before spawning", async () => {
    const error = await session(worker, {
      ...captureLog(),
      sandbox: "os",
      permissions: "all",
    }).catch((e) => e);
    assert.ok(error instanceof PermissionError, String(error));
  });
});
