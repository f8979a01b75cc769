// The pid namespace the bubblewrap-sandboxed workers of one parent share
// (src/runtime/sandbox/pid_namespace.ts): its holder process, with real
// processes. What the workers in it can do to each other is tested in
// tests/security/pid_namespace_test.ts and signal_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readlinkSync, realpathSync } from "node:fs";
import process from "node:process";
import { WorkerStartError } from "../../mod.ts";
import { detect } from "../../src/runtime/detect.ts";
import {
  acquirePidNamespace,
  bindPidNamespace,
  HOLDER_LINGER_MS,
  HOLDER_PID_SLOT,
  holderArgv,
  joinShell,
  pidNamespaceHolders,
  startPidNamespaceAhead,
} from "../../src/runtime/sandbox/pid_namespace.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";
import { rejection, until } from "../_helpers/wait.ts";

checkNoLeaks();

const adapter = detect();

function tools() {
  const bwrap = realpathSync(
    (process.env.PATH ?? "").split(":").map((dir) => `${dir}/bwrap`).find(
      (path) => {
        try {
          realpathSync(path);
          return true;
        } catch {
          return false;
        }
      },
    ) ?? "/usr/bin/bwrap",
  );
  return { bwrap, shell: "/bin/sh", setpriv: undefined };
}

describe("pid namespace holder: argv", () => {
  test("holderArgv() makes user and pid namespaces with no capability but CAP_SYS_RESOURCE", () => {
    const argv = holderArgv({
      bwrap: "/usr/bin/bwrap",
      shell: "/bin/sh",
      setpriv: "/usr/bin/setpriv",
    });
    assert.deepEqual(argv.slice(0, 5), [
      "/usr/bin/setpriv",
      "--pdeathsig",
      "KILL",
      "--",
      "/usr/bin/bwrap",
    ]);
    for (const flag of ["--unshare-user", "--unshare-pid", "--unshare-net"]) {
      assert.ok(argv.includes(flag), flag);
    }
    const caps = argv.flatMap((arg, i) =>
      arg === "--cap-add" || arg === "--cap-drop"
        ? [`${arg} ${argv[i + 1]}`]
        : []
    );
    assert.deepEqual(caps, ["--cap-drop ALL", "--cap-add CAP_SYS_RESOURCE"]);
    assert.match(argv.at(-1) ?? "", /max_user_namespaces/);
  });

  test("bindPidNamespace() fills the one slot joinShell() leaves, and refuses anything else", () => {
    const argv = [...joinShell("/bin/sh"), "/usr/bin/bwrap"];
    assert.deepEqual(bindPidNamespace(argv, 4242).slice(-2), [
      "4242",
      "/usr/bin/bwrap",
    ]);
    assert.throws(() => bindPidNamespace(["/usr/bin/bwrap"], 4242), RangeError);
    assert.throws(
      () => bindPidNamespace([HOLDER_PID_SLOT, HOLDER_PID_SLOT], 4242),
      RangeError,
    );
    assert.throws(() => bindPidNamespace(argv, 1), RangeError);
  });
});

describe("pid namespace holder: process", needs("bwrap"), () => {
  test("acquirePidNamespace() shares one holder, which ends after the last release", async () => {
    const a = await acquirePidNamespace(adapter, tools(), "a.ts");
    const b = await acquirePidNamespace(adapter, tools(), "b.ts");
    assert.equal(a.holderPid, b.holderPid, "one holder");
    const init = readFileSync(
      `/proc/${a.holderPid}/task/${a.holderPid}/children`,
      "utf8",
    ).trim().split(" ")[0];
    const ns = readlinkSync(`/proc/${init}/ns/pid`);
    assert.notEqual(
      ns,
      readlinkSync("/proc/self/ns/pid"),
      "its own pid namespace",
    );
    a.release();
    a.release(); // idempotent: b still holds it
    await new Promise((resolve) => setTimeout(resolve, HOLDER_LINGER_MS + 500));
    assert.ok(isAlive(a.holderPid), "alive while b holds it");
    b.release();
    const c = await acquirePidNamespace(adapter, tools(), "c.ts");
    assert.equal(c.holderPid, a.holderPid, "taken again within the linger");
    assert.deepEqual(pidNamespaceHolders(), [a.holderPid]);
    c.release();
    await until(
      () => !isAlive(a.holderPid),
      HOLDER_LINGER_MS + 10_000,
      "the holder ended",
    );
  });

  test("startPidNamespaceAhead() starts the holder a later acquirePidNamespace() joins; one nobody joins ends", async () => {
    // A worker's start begins the holder while its build goes on.
    const before = new Set(pidNamespaceHolders());
    const fresh = (): number | undefined =>
      pidNamespaceHolders().find((pid) => !before.has(pid));
    startPidNamespaceAhead(adapter, tools(), "ahead.ts");
    await until(() => fresh() !== undefined, 10_000, "a holder started ahead");
    const ahead = fresh() as number;
    const lease = await acquirePidNamespace(adapter, tools(), "ahead.ts");
    assert.equal(
      lease.holderPid,
      ahead,
      "the worker joins the holder started ahead",
    );
    lease.release();
    await until(() => !isAlive(ahead), HOLDER_LINGER_MS + 10_000, "it ended");
    await until(
      () => !pidNamespaceHolders().includes(ahead),
      10_000,
      "its exit seen",
    );

    startPidNamespaceAhead(adapter, tools(), "unjoined.ts");
    await until(() => fresh() !== undefined, 10_000, "a second holder");
    const unjoined = fresh() as number;
    await until(
      () => !isAlive(unjoined),
      HOLDER_LINGER_MS + 10_000,
      "the holder no worker joined ended",
    );
  });

  test("a holder started ahead that cannot run fails the worker's acquirePidNamespace() with WorkerStartError", async () => {
    const broken = { ...tools(), shell: "/nonexistent/sh" };
    startPidNamespaceAhead(adapter, broken, "db.ts");
    const error = await rejection(
      acquirePidNamespace(adapter, broken, "db.ts"),
      WorkerStartError,
    );
    assert.equal(error.failure, "spawn");
    assert.match(error.message, /pid namespace/);
  });

  test("acquirePidNamespace() fails the start with WorkerStartError when the holder cannot run", async () => {
    const error = await rejection(
      acquirePidNamespace(
        adapter,
        { ...tools(), shell: "/nonexistent/sh" },
        "db.ts",
      ),
      WorkerStartError,
    );
    assert.equal(error.failure, "spawn");
    assert.match(error.message, /pid namespace/);
  });
});
