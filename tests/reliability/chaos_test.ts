// deno-lint-ignore-file no-console
// Chaos: thousands of calls with many in flight while workers die at random
// moments. Seeded: AIRLOCK_CHAOS_SEED replays a run's choices, kills from
// outside included (they follow settled calls; what each call is doing when
// one lands still varies); AIRLOCK_CHAOS_CALLS scales it.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pool, session, WorkerCrashedError } from "../../mod.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { within } from "../_helpers/wait.ts";
import {
  accounting,
  type ChaosOptions,
  chaosSeed,
  runChaos,
} from "./_chaos.ts";

checkNoLeaks();

const worker = new URL(
  "../fixtures/reliability/chaos_worker.ts",
  import.meta.url,
);
const CALLS = Number(process.env.AIRLOCK_CHAOS_CALLS ?? 2_000);
const SEED = chaosSeed();
/**
 * A chaos run's deadline: a hang, not a slow run. Each worker killed is a
 * worker start, and the kills come by the clock, so a run on a loaded
 * machine (both cores busy) takes several times its 20 to 70 s here.
 */
const RUN_DEADLINE_MS = 300_000;
/** The test's own timeout (Bun's is 120 s unless a test sets one). */
const LONG = { timeout: RUN_DEADLINE_MS + 30_000 };

function chaosOptions(dir: string): ChaosOptions {
  return {
    calls: CALLS,
    inFlight: 12,
    seed: SEED,
    dir,
    callDeadlineMs: 15_000,
    selfKillRate: 0.02,
    // About as often as every 10 to 60 ms on a machine running nothing
    // else, where 12 calls in flight settle 2 to 3 a millisecond.
    killEveryCalls: [20, 120],
    disruptEvery: 250,
  };
}

/** The session's worker, once it has answered a call since it started. */
function servingPids(s: {
  pid: number | undefined;
  stats(): { completed: number };
}): number[] {
  const pid = s.pid;
  if (pid === undefined) return [];
  const completed = s.stats().completed;
  let first = firstSeen.get(pid);
  if (first === undefined) firstSeen.set(pid, first = completed);
  return completed > first ? [pid] : [];
}
const firstSeen = new Map<number, number>();

function workerOptions(dir: string) {
  return {
    ...captureLog(),
    permissions: { read: [dir], write: [dir] },
    // `read` is declared idempotent by the worker, `peek` only here.
    idempotent: ["peek"],
    // Far more crashes than life brings: a call may be lost several times.
    maxRetries: 10,
  };
}

describe("retries of idempotent ops", needsWorkers(), () => {
  test("session() and pool() retry a call lost in a crash when the worker declares its op idempotent, and only then", async () => {
    const dir = mkdtempSync(join(tmpdir(), "airlock-chaos-"));
    try {
      const options = {
        ...captureLog(),
        permissions: { read: [dir], write: [dir] },
      };
      await using s = await session(worker, options);
      await using p = pool(worker, options);
      for (const [name, target] of [["session", s], ["pool", p]] as const) {
        // `read` with dieOnce kills its worker the first time it runs.
        assert.equal(
          await target.call("read", [dir, `${name}-r`, 1, true]),
          `${name}-r:2`,
        );
        const lost = await target.call("write", [dir, `${name}-w`, 1, "before"])
          .then(() => undefined, (error: unknown) => error);
        assert.ok(lost instanceof WorkerCrashedError, String(lost));
        assert.equal(lost.op, "write");
      }
      assert.equal(s.stats().crashed, 2);
      assert.equal(p.stats().crashed, 2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("chaos", needsWorkers(), () => {
  test(
    `session() under ${CALLS} calls, 12 in flight, restarts and workers killed from inside and outside, balances its books`,
    LONG,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "airlock-chaos-"));
      try {
        const s = await session(worker, workerOptions(dir));
        let report;
        try {
          report = await within(
            runChaos({
              call: (op, args, options) => {
                servingPids(s); // notes a new worker as soon as calls reach it
                return s.call(op, args, options);
              },
              pids: () => servingPids(s),
              disrupt: () => s.restart(),
            }, chaosOptions(dir)),
            RUN_DEADLINE_MS,
            "the chaos run",
          );
        } finally {
          await s.close();
        }
        const stats = s.stats();
        console.log(
          accounting(`session on ${RUNTIME}`, SEED, report, stats.crashed),
        );
        assert.deepEqual(report.problems.slice(0, 20), []);
        assert.ok(report.maxInFlight >= 8, `in flight ${report.maxInFlight}`);
        assert.equal(report.ok + report.crashed, CALLS);
        assert.ok(report.crashed > 0, "some calls crashed");
        assert.equal(stats.calls, CALLS);
        assert.equal(stats.completed, report.ok);
        assert.equal(stats.failed, report.crashed);
        assert.ok(stats.crashed > 0);
        assert.equal(stats.pid, undefined);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  test(
    `pool() under ${CALLS} calls, 12 in flight on 2 workers of concurrency 1 with calls written ahead, workers killed from inside and outside: no write runs twice`,
    LONG,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "airlock-chaos-"));
      try {
        // At max with concurrency 1, most calls are written ahead (the default
        // pipeline, an adaptive window of up to 16): a crash must send back
        // only those the worker had not started.
        const p = pool(worker, {
          ...workerOptions(dir),
          max: 2,
          prewarm: 2,
          concurrency: 1,
        });
        let report;
        try {
          report = await within(
            runChaos({
              call: (op, args, options) => p.call(op, args, options),
              pids: () =>
                p.stats().perWorker.filter((w) =>
                  !w.retiring && w.calls > w.running
                ).map((w) => w.pid),
            }, chaosOptions(dir)),
            RUN_DEADLINE_MS,
            "the chaos run",
          );
        } finally {
          await p.close();
        }
        const stats = p.stats();
        console.log(
          accounting(
            `pipelined pool on ${RUNTIME}`,
            SEED,
            report,
            stats.crashed,
          ),
        );
        assert.deepEqual(report.problems.slice(0, 20), []);
        assert.equal(report.ok + report.crashed, CALLS);
        assert.ok(report.crashed > 0, "some calls crashed");
        assert.equal(stats.completed, report.ok);
        assert.equal(stats.failed, report.crashed);
        assert.ok(stats.crashed > 0);
        assert.equal(stats.workers, 0);
        assert.equal(stats.queued, 0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  test(
    `pool() under ${CALLS} calls, 12 in flight on 3 workers, recycling and workers killed from inside and outside, balances its books`,
    LONG,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "airlock-chaos-"));
      try {
        const p = pool(worker, {
          ...workerOptions(dir),
          max: 3,
          concurrency: 4,
          maxTasksPerWorker: 20,
        });
        let report;
        try {
          report = await within(
            runChaos({
              call: (op, args, options) => p.call(op, args, options),
              pids: () =>
                p.stats().perWorker.filter((w) =>
                  !w.retiring && w.calls > w.running
                ).map((w) => w.pid),
            }, chaosOptions(dir)),
            RUN_DEADLINE_MS,
            "the chaos run",
          );
        } finally {
          await p.close();
        }
        const stats = p.stats();
        console.log(
          accounting(`pool on ${RUNTIME}`, SEED, report, stats.crashed),
        );
        assert.deepEqual(report.problems.slice(0, 20), []);
        assert.ok(report.maxInFlight >= 8, `in flight ${report.maxInFlight}`);
        assert.equal(report.ok + report.crashed, CALLS);
        assert.ok(report.crashed > 0, "some calls crashed");
        assert.equal(stats.completed, report.ok);
        assert.equal(stats.failed, report.crashed);
        assert.ok(stats.crashed > 0);
        assert.ok(stats.recycledBy.tasks > 0);
        assert.equal(stats.workers, 0);
        assert.equal(stats.queued, 0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});
