// A sandboxed worker killed its parent and every process of the user in 0.1
// (issue 14 item 1): no pid namespace, no signal scoping. Now a worker cannot
// signal its parent, another worker, an unrelated process or pid 1, from
// JavaScript or native code: Landlock's signal scoping (ABI 6) refuses it,
// and bubblewrap's pid namespace where it is used. Only signal 0 (a
// permission check) is sent to the parent and pid 1, so a regression cannot
// take the test runner down with it. kill(-1) goes through the same check
// for each process, but its result cannot be tested safely: the kernel
// reports success when every process refused with EPERM, and a real signal
// would reach every process of the user if the check failed.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { session } from "../../mod.ts";
import type confine from "../fixtures/security/confine_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needs, needsSandbox } from "../_helpers/tools.ts";

checkNoLeaks();

const worker = fixture("security/confine_worker.ts");
const SIGKILL = 9;
const SIGSTOP = 19;

function options() {
  return {
    ...captureLog(),
    sandbox: "os" as const,
    // Deno needs ffi to call kill(2) at all; Bun calls it from JavaScript.
    permissions: RUNTIME === "deno" ? { ffi: true } : {},
  };
}

describe("signals", needsSandbox(), () => {
  test("a worker cannot signal its parent or pid 1", async () => {
    await using s = await session<typeof confine>(worker, options());
    assert.notEqual(await s.signal(process.pid, 0), "ok");
    assert.notEqual(await s.signal(1, 0), "ok");
    assert.equal(await s.signal(0, 0), "ok", "its own process group");
  });

  test("a worker cannot kill or stop an unrelated process of the user", async () => {
    // An unrelated process of the same user.
    const victim = spawn("sleep", ["600"], { stdio: "ignore" });
    try {
      const pid = victim.pid;
      assert.ok(pid !== undefined && isAlive(pid));
      await using s = await session<typeof confine>(worker, options());
      assert.notEqual(await s.signal(pid, SIGSTOP), "ok");
      assert.notEqual(await s.signal(pid, SIGKILL), "ok");
      assert.ok(isAlive(pid), "the victim survived");
    } finally {
      victim.kill("SIGKILL");
      await new Promise((resolve) => victim.once("exit", resolve));
    }
  });

  test("a worker cannot kill another worker", async () => {
    await using target = await session<typeof confine>(worker, options());
    await using s = await session<typeof confine>(worker, options());
    const pid = target.pid;
    assert.ok(pid !== undefined);
    assert.notEqual(await s.signal(pid, SIGKILL), "ok");
    assert.equal(await target.runtime(), RUNTIME, "the target still answers");
  });

  test(
    "a worker cannot stop or kill its sibling by the pid the sibling has inside the sandbox",
    needs("landlock"),
    async () => {
      // Workers of one parent that share files see distinct pids (issue 23):
      // under bubblewrap they share one pid namespace, where each is a
      // different Landlock domain that cannot signal another.
      await using target = await session<typeof confine>(worker, options());
      await using s = await session<typeof confine>(worker, options());
      const inner = await target.ownPid();
      assert.notEqual(inner, await s.ownPid(), "distinct pids");
      assert.notEqual(await s.signal(inner, 0), "ok");
      assert.notEqual(await s.signal(inner, SIGSTOP), "ok");
      assert.notEqual(await s.signal(inner, SIGKILL), "ok");
      assert.equal(await target.runtime(), RUNTIME, "the target still answers");
    },
  );
});
