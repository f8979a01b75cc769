// Attack class: exhausting the machine (memory, processes, CPU, disk,
// descriptors). A worker's limits are enforced by the kernel (cgroups and
// rlimits, docs/operations.md "Limits"); each attack here is bounded so that
// a limit not enforced fails the test rather than taking the machine.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  readdirSync,
  readFileSync,
  realpathSync,
  statSync,
  writeFileSync,
} from "node:fs";
import {
  oneShot,
  PermissionError,
  pool,
  RemoteError,
  session,
  WorkerCrashedError,
} from "../../mod.ts";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { cgroupBackend } from "../../src/runtime/sandbox/limits/open_cgroups.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsSandbox, needsWorkers, skipUnless } from "../_helpers/tools.ts";
import { rejection, until } from "../_helpers/wait.ts";

checkNoLeaks();

const dir = scratchDir("limits");
after(() => dir[Symbol.dispose]());
const worker = fixture("limits_worker.ts");
const MiB = 2 ** 20;

function cgroupsHere(): string | undefined {
  if (process.platform !== "linux") return "cgroups are Linux only";
  const backend = cgroupBackend(RUNTIME);
  if ("error" in backend) return `no cgroup can be had here: ${backend.error}`;
  if (!backend.memory || !backend.pids) {
    return "the parent's cgroups lack the memory or pids controller";
  }
  return needsWorkers().skip;
}

/** The peak resident memory of this process (VmHWM), in bytes. */
function peakRss(): number {
  const status = readFileSync("/proc/self/status", "utf8");
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? 0) * 1024;
}

/** Live processes whose command line holds `marker`. */
function withMarker(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, "utf8").includes(marker)) {
        found.push(Number(entry));
      }
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

describe(
  "limits: the kernel holds a worker to them",
  skipUnless(cgroupsHere()),
  () => {
    test("limits.memoryBytes: a worker filling 2 GiB under 256 MiB is killed with limit memoryBytes, the parent barely grows, the next call runs on a fresh worker", async () => {
      await using s = await session(worker, {
        limits: { memoryBytes: 256 * MiB },
      });
      assert.equal(s.stats().limits.memoryBytes, "cgroup");
      const before = peakRss();
      const first = s.pid;
      const error = await rejection(
        s.call("fill", [2048 * MiB, 32 * MiB]),
        WorkerCrashedError,
      );
      assert.equal(error.limit, "memoryBytes");
      assert.match(
        error.message,
        /ended by the kernel at its memory limit \(limits\.memoryBytes/,
      );
      const grown = peakRss() - before;
      assert.ok(grown < 200 * MiB, `the parent's peak grew ${grown} bytes`);
      assert.equal(await s.call("ping", []), "pong");
      assert.notEqual(s.pid, first);
    });

    test("limits.cpuSeconds: a busy loop under 1 s of CPU ends within 10 s with limit cpuSeconds", async () => {
      await using s = await session(worker, { limits: { cpuSeconds: 1 } });
      assert.equal(s.stats().limits.cpuSeconds, "rlimit");
      const started = Date.now();
      const error = await rejection(
        s.call("spin", [20_000]),
        WorkerCrashedError,
      );
      assert.ok(Date.now() - started < 10_000, `${Date.now() - started} ms`);
      assert.equal(error.limit, "cpuSeconds");
      assert.equal(error.signal, "SIGXCPU");
      assert.equal(await s.call("ping", []), "pong");
    });

    test("limits.fileSizeBytes: a 10 MiB write under 1 MiB leaves at most 1 MiB on disk", async () => {
      const file = dir.join("big.bin");
      await using s = await session(worker, {
        limits: { fileSizeBytes: MiB },
        permissions: { write: [dir.path] },
      });
      assert.equal(s.stats().limits.fileSizeBytes, "rlimit");
      const outcome = await s.call("write", [file, 10 * MiB]).then(
        () => undefined,
        (error: unknown) => error,
      );
      // Deno dies of SIGXFSZ; Bun ignores the signal and the write fails
      // with EFBIG inside the worker.
      if (outcome instanceof WorkerCrashedError) {
        assert.equal(outcome.limit, "fileSizeBytes");
        assert.equal(outcome.signal, "SIGXFSZ");
      } else {
        assert.ok(outcome instanceof RemoteError, String(outcome));
        assert.equal(outcome.code, "EFBIG");
      }
      let size = 0;
      try {
        size = statSync(file).size;
      } catch {
        // Nothing written at all.
      }
      assert.ok(size <= MiB, `${size} bytes on disk`);
      assert.equal(await s.call("ping", []), "pong");
    });

    test("limits.processes: 300 spawns under 64 start fewer than 64, the worker answers, none is left after close()", async () => {
      const sleep = realpathSync("/bin/sleep");
      const marker = `${
        3600 + Math.floor(Math.random() * 1000)
      }.${process.pid}`;
      const s = await session(worker, {
        limits: { processes: 64 },
        permissions: { run: [sleep] },
      });
      try {
        assert.equal(s.stats().limits.processes, "cgroup");
        const { started, error } = await s.call("spawnMany", [
          sleep,
          300,
          marker,
        ]) as {
          started: number;
          error: string | undefined;
        };
        assert.ok(started > 0 && started < 64, `${started} started`);
        assert.equal(error, "EAGAIN");
        // Bun keeps answering. Deno needs threads of its own and exits when
        // it cannot start one ("unable to create worker threads"): that call
        // fails naming the limit, and the next runs on a fresh worker.
        const answer = await s.call("ping", []).catch((e: unknown) => e);
        if (RUNTIME === "deno" && answer instanceof WorkerCrashedError) {
          assert.equal(answer.limit, "processes");
          assert.equal(await s.call("ping", []), "pong");
        } else {
          assert.equal(answer, "pong");
        }
      } finally {
        await s.close();
      }
      await until(
        () => withMarker(marker).length === 0,
        10_000,
        "no sleep process left",
      );
    });

    test("limits.openFiles: 200 opens under 64 fail with EMFILE inside the worker, which keeps answering", async () => {
      const file = dir.join("open.txt");
      writeFileSync(file, "x");
      await using s = await session(worker, {
        limits: { openFiles: 64 },
        permissions: { read: [dir.path] },
      });
      assert.equal(s.stats().limits.openFiles, "rlimit");
      const { opened, error } = await s.call("openMany", [file, 200]) as {
        opened: number;
        error: string | undefined;
      };
      assert.ok(opened > 0 && opened < 64, `${opened} opened`);
      assert.equal(error, "EMFILE");
      assert.equal(await s.call("ping", []), "pong");
    });

    test("limits on oneShot and pool: the call past a limit rejects with its key, the next runs on a fresh worker", async () => {
      const fresh = oneShot(worker, { limits: { memoryBytes: 128 * MiB } });
      const error = await rejection(
        fresh.call("fill", [1024 * MiB, 32 * MiB]),
        WorkerCrashedError,
      );
      assert.equal(error.limit, "memoryBytes");
      assert.equal(await fresh.call("ping", []), "pong");
      await using p = pool(worker, { max: 1, limits: { cpuSeconds: 1 } });
      const spun = await rejection(
        p.call("spin", [20_000]),
        WorkerCrashedError,
      );
      assert.equal(spun.limit, "cpuSeconds");
      assert.equal(await p.call("ping", []), "pong");
      assert.equal(p.stats().perWorker[0]?.limits.cpuSeconds, "rlimit");
    });

    test(
      "limits: a sandboxed worker cannot move itself out of its cgroups",
      needsSandbox(),
      async () => {
        await using s = await session(worker, {
          limits: { memoryBytes: 256 * MiB },
        });
        const pid = s.pid ?? 0;
        const groups = () =>
          readFileSync(`/proc/${pid}/cgroup`, "utf8").split("\n").filter((
            line,
          ) => /:(memory|pids):/.test(line));
        const before = groups();
        assert.ok(
          before.every((line) => line.includes("/airlock-")),
          before.join(),
        );
        const roots = [
          "/sys/fs/cgroup/pids/cgroup.procs",
          "/sys/fs/cgroup/memory/cgroup.procs",
          "/sys/fs/cgroup/unified/cgroup.procs",
          "/sys/fs/cgroup/cgroup.procs",
        ];
        const outcomes = await s.call("escape", [roots]) as string[];
        assert.ok(!outcomes.includes("ok"), outcomes.join());
        assert.deepEqual(groups(), before);
      },
    );

    test("limits under strict: one that cannot be enforced (a launcher runs the worker elsewhere) refuses the start with PermissionError naming it and the fix", async () => {
      const error = await rejection(
        session(worker, {
          launcher: ["env"],
          limits: { memoryBytes: 256 * MiB },
        }),
        PermissionError,
      );
      assert.equal(error.permission, "limits.memoryBytes");
      assert.match(error.message, /launcher.*enforce "best-effort"/);
    });

    test("limits: every worker gets the default processes limit and the highest oom_score_adj", async () => {
      await using s = await session(worker, {});
      assert.equal(s.stats().limits.processes, "cgroup");
      const pid = s.pid ?? 0;
      assert.equal(
        readFileSync(`/proc/${pid}/oom_score_adj`, "utf8").trim(),
        "1000",
      );
      const pids = readFileSync(`/proc/${pid}/cgroup`, "utf8").match(
        /:pids:(.*)$/m,
      )?.[1];
      assert.ok(pids?.includes("/airlock-"), String(pids));
      await using p = pool(worker, { max: 1, limits: { openFiles: 256 } });
      assert.equal(await p.call("ping", []), "pong");
      assert.deepEqual(p.stats().perWorker[0]?.limits, {
        memoryBytes: "none",
        processes: "cgroup",
        cpuSeconds: "none",
        fileSizeBytes: "none",
        openFiles: "rlimit",
      });
    });
  },
);

describe(
  "limits on a Deno parent with the README's minimum flags",
  needsWorkers("deno"),
  () => {
    test("a Deno parent without -A starts workers, refuses limits.memoryBytes naming -A, and refuses maxRssBytes rather than never recycling", () => {
      const repo = fileURLToPath(new URL("../../", import.meta.url));
      const readme = readFileSync(join(repo, "README.md"), "utf8");
      const flags = /`deno run ((?:--allow-[a-z]+ )+)main\.ts`/.exec(readme)
        ?.[1]
        ?.trim().split(" ");
      assert.ok(flags, "the README has a deno run line");
      const out = execFileSync(join(repo, "node_modules", ".bin", "deno"), [
        "run",
        "--no-prompt",
        ...flags,
        fileURLToPath(fixture("limits_parent.ts")),
      ], {
        encoding: "utf8",
        timeout: 120_000,
        env: {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          HOME: process.env.HOME ?? "/root",
        },
      });
      const report = JSON.parse(out.trim().split("\n").at(-1) ?? "{}");
      assert.equal(report.ping, "pong");
      assert.equal(report.limits.memoryBytes, "none");
      assert.equal(report.memory.name, "PermissionError");
      assert.equal(report.memory.permission, "limits.memoryBytes");
      assert.match(report.memory.message, /--allow-all \(-A\)/);
      assert.equal(report.maxRss.name, "AirlockError");
      assert.match(report.maxRss.message, /maxRssBytes.*--allow-all \(-A\)/);
    });
  },
);
