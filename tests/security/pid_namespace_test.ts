// Attack class: a worker signals processes outside itself (its parent,
// other workers, every process of the user with kill(-1)), and a worker
// lies about its pid. Sandboxed workers run in their own pid namespace; the
// parent takes the worker's real pid from the process tree, never from the
// worker's hello.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, realpathSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { type PermissionsOption, session } from "../../mod.ts";
import { RUNTIME_CONFINE_STEP_ENV } from "../../src/runtime/sandbox/native_step.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needs } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";
import { bwrapSkip, HOSTILE } from "./_sandbox.ts";
import type hostile from "../fixtures/security/hostile_worker.ts";
import type confine from "../fixtures/security/confine_worker.ts";

checkNoLeaks();

const SKIP = bwrapSkip();
// Workers share a pid namespace under bubblewrap where Landlock has signal
// scoping (ABI 6); elsewhere each has its own.
const SHARED_SKIP = SKIP || (needs("landlock").skip ?? false);
const CONFINE = new URL(
  "../fixtures/security/confine_worker.ts",
  import.meta.url,
);
// Deno needs a run grant for process.kill: the worst case of the report.
const PERMISSIONS: PermissionsOption = RUNTIME === "deno" ? { run: true } : {};

const SIGCONT = 18;

/** A process's state letter (`/proc/<pid>/stat`): `"T"` when stopped. */
function processState(pid: number): string {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0] ?? "";
}

/** The pids of a process in each pid namespace, outermost first (NSpid). */
function nsPids(pid: number): number[] {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const line = /^NSpid:\s+(.+)$/m.exec(status)?.[1] ?? "";
  return line.trim().split(/\s+/).map(Number);
}

describe("pid namespace", () => {
  test(
    "a sandboxed worker cannot see or signal its parent, other workers or every process",
    {
      skip: SKIP,
    },
    async () => {
      await using a = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      await using b = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      assert.deepEqual(await a.signal(process.pid, 0), {
        ok: false,
        error: "ESRCH",
      }, "the parent");
      // Another worker by its host pid: not a pid the worker can reach.
      assert.equal(
        (await a.signal(b.pid ?? 0, 0)).ok,
        false,
        "another worker",
      );
      assert.equal(
        (await a.signal(await a.ownPid(), 0)).ok,
        true,
        "itself",
      );
    },
  );

  test(
    "session pid and stats().pid are the worker's real host pid, not the one it reports",
    {
      skip: SKIP,
    },
    async () => {
      await using s = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      const inside = await s.ownPid();
      assert.ok(s.pid !== undefined);
      assert.notEqual(s.pid, inside, "the pid inside the namespace");
      assert.equal(s.stats().pid, s.pid);
      const pids = nsPids(s.pid);
      assert.equal(pids[0], s.pid);
      assert.equal(pids.at(-1), inside, "the same process, seen from inside");
      const exe = realpathSync(`/proc/${s.pid}/exe`);
      assert.match(exe, RUNTIME === "deno" ? /deno/ : /bun/);
      assert.ok(
        (s.stats().rssBytes ?? 0) > 10 * 1024 * 1024,
        "the runtime's memory",
      );
    },
  );

  test(
    "workers of one parent see distinct pids, and none can signal, trace or read /proc of another",
    { skip: SHARED_SKIP },
    async () => {
      // LMDB (and any client that keys shared state by pid) needs distinct
      // pids across the workers that share its files (issue 23).
      const options = {
        sandbox: "os" as const,
        // Deno needs ffi for the native calls; Bun makes them from JavaScript.
        permissions: RUNTIME === "deno" ? { ffi: true } : {},
      };
      await using a = await session<typeof confine>(CONFINE, options);
      await using b = await session<typeof confine>(CONFINE, options);
      const own = await a.ownPid();
      const sibling = await b.ownPid();
      assert.notEqual(own, sibling, "distinct pids");
      assert.notEqual(await a.signal(sibling, 0), "ok", "signal");
      assert.notEqual(await a.nativePtrace(sibling), "ok", "ptrace");
      for (const file of ["status", "cmdline", "environ", "stat"]) {
        assert.notEqual(
          await a.nativeOpen(`/proc/${sibling}/${file}`),
          "ok",
          `the sibling's /proc/${sibling}/${file}`,
        );
      }
      assert.notEqual(await a.nativeOpen("/proc"), "ok", "listing /proc");
      assert.equal(
        await a.nativeOpen(`/proc/${own}/status`),
        "ok",
        "its own /proc entry",
      );
      assert.equal(await b.runtime(), RUNTIME, "the sibling still answers");
    },
  );

  test(
    "kill(-1) from a worker reaches no sibling",
    { skip: SKIP },
    async () => {
      // kill(-1, 0) reports success when every process refused, so the
      // result says nothing: a real, harmless signal is sent instead.
      // SIGCONT to a stopped sibling would resume it; the sibling must stay
      // stopped. (If the sandbox failed, the signal could reach every
      // process of the user: SIGCONT only resumes stopped ones.)
      await using a = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      await using b = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      const pid = b.pid ?? 0;
      process.kill(pid, "SIGSTOP");
      try {
        await until(() => processState(pid) === "T", 10_000, "b stopped");
        await a.signal(-1, SIGCONT);
        assert.equal(processState(pid), "T", "b is still stopped");
      } finally {
        process.kill(pid, "SIGCONT");
      }
      assert.equal(await b.ownPid() > 0, true, "b answers again");
    },
  );

  test(
    "a worker granted read on /proc sees no process outside its own sandbox",
    {
      skip: SKIP ||
        (RUNTIME === "deno" &&
          "Deno lists /proc only with --allow-all: the OS sandbox is tested on Bun"),
    },
    async () => {
      await using other = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: PERMISSIONS,
      });
      await using s = await session<typeof hostile>(HOSTILE, {
        sandbox: "os",
        permissions: { ...PERMISSIONS, read: true },
      });
      const listed = await s.list("/proc");
      assert.equal(listed.ok, true, JSON.stringify(listed));
      const own = await s.ownPid();
      const pids = (listed.ok ? listed.value as string[] : [])
        .filter((name) => /^\d+$/.test(name)).map(Number);
      assert.ok(pids.includes(own), `its own entry in ${pids}`);
      // Itself, and bubblewrap's init: not the other worker, not the parent.
      assert.deepEqual(
        pids.filter((pid) => pid !== own && pid !== 1),
        [],
        `processes it sees besides itself and its init (the other worker is ${await other
          .ownPid()})`,
      );
    },
  );

  test(
    "a worker in the shared pid namespace has SIGKILL as its parent-death signal, on both confine steps",
    { skip: SHARED_SKIP || (needs("setpriv").skip ?? false) },
    async () => {
      // bubblewrap there does not die with the parent (the holder's end
      // kills the worker), so the worker must die with bubblewrap: the
      // native step sets the signal itself, setpriv does for the runtime
      // step. (Its cgroup's end kills it too, where there is one.)
      const options = {
        sandbox: "os" as const,
        permissions: RUNTIME === "deno" ? { ffi: true } : {},
      };
      const SIGKILL = 9;
      for (const step of ["native", "runtime"]) {
        const previous = process.env[RUNTIME_CONFINE_STEP_ENV];
        if (step === "runtime") process.env[RUNTIME_CONFINE_STEP_ENV] = "1";
        try {
          await using s = await session<typeof confine>(CONFINE, options);
          assert.equal(await s.parentDeathSignal(), SIGKILL, step);
          const status = readFileSync(`/proc/${s.pid}/status`, "utf8");
          const parent = Number(/^PPid:\s+(\d+)$/m.exec(status)?.[1]);
          assert.match(
            readFileSync(`/proc/${parent}/cmdline`, "utf8"),
            /bwrap/,
            `${step}: the worker's parent is bubblewrap`,
          );
        } finally {
          if (previous === undefined) {
            delete process.env[RUNTIME_CONFINE_STEP_ENV];
          } else process.env[RUNTIME_CONFINE_STEP_ENV] = previous;
        }
      }
    },
  );

  test("a forged hello pid is not believed", {
    skip: process.platform !== "linux" && "reads /proc",
  }, async () => {
    const program = fileURLToPath(
      new URL("../fixtures/security/forged_hello_command.ts", import.meta.url),
    );
    const runtime = process.execPath;
    await using s = await session(HOSTILE, {
      // Unconfined, as a command was before commands were sandboxed: Deno
      // as a command needs its cache directory.
      permissions: "all",
      command: RUNTIME === "deno"
        ? [runtime, "run", "-A", "--quiet", program]
        : [runtime, program],
    });
    assert.notEqual(s.pid, 1);
    assert.equal(s.stats().pid, s.pid);
    assert.equal(realpathSync(`/proc/${s.pid}/exe`), realpathSync(runtime));
  });
});
