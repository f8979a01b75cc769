// deno-lint-ignore-file no-console
/**
 * BullMQ spreads jobs, airlock isolates them: 2,000 jobs through a BullMQ
 * queue on a real Redis (a throwaway `redis-server` on a free loopback port,
 * started by ./start_redis.sh), each job's processor an airlock pool call
 * (./airlock_bullmq.ts), with a worker process killed every 200 ms. Ends
 * with every job completed and its effect applied exactly once (one file
 * per job id, created exclusively by ./job_worker.ts), no job failed, and no
 * worker process left. Exits 1 if a claim does not hold.
 *
 * ```sh
 * deno run -A main.ts   # or: bun main.ts
 * ```
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { Queue, Worker } from "bullmq";
import { pool } from "../../mod.ts";
import { liveWorkers } from "../../testing.ts";
import { airlockProcessor } from "./airlock_bullmq.ts";
import type jobWorker from "./job_worker.ts";

const JOBS = 2_000;
const KILL_EVERY_MS = 200;

// Claims are checked inside the try: a failure is noted and the process
// exits 1 after the finally has stopped Redis (process.exit there would
// skip it and leave the server running).
let failures = 0;
function check(condition: boolean, claim: string): void {
  if (!condition) {
    console.error(`claim does not hold: ${claim}`);
    failures++;
  }
}

const script = new URL("./start_redis.sh", import.meta.url).pathname;
const redisDir = join(tmpdir(), `airlock-example-redis-${process.pid}`);
const redis = JSON.parse(
  execFileSync("bash", [script, redisDir], { encoding: "utf8" }).trim(),
) as { port: number; pid: number };
const dir = mkdtempSync(join(tmpdir(), "airlock-example-bullmq-"));
const connection = { host: "127.0.0.1", port: redis.port };
const name = `airlock-${process.pid}`;
let kills = 0;
try {
  await using p = pool<typeof jobWorker>(
    new URL("./job_worker.ts", import.meta.url),
    { max: 4, permissions: { read: [dir], write: [dir] } },
  );
  const queue = new Queue(name, { connection });
  const worker = new Worker(
    name,
    airlockProcessor(p, "apply", {
      idempotent: true,
      args: (job) => [dir, String(job.id), job.data.value],
    }),
    { connection, concurrency: 16 },
  );
  let completed = 0;
  let failed = 0;
  let retried = 0;
  worker.on("completed", () => void completed++);
  // "failed" fires for every failed attempt: only the last one fails the job.
  worker.on("failed", (job, error) => {
    if (job && job.attemptsMade < (job.opts.attempts ?? 1)) {
      retried++;
      return;
    }
    failed++;
    console.error(`job ${job?.id} failed: ${error.message}`);
  });
  const killer = setInterval(() => {
    const victim = p.stats().perWorker.find((w) => w.running > 0);
    if (!victim) return;
    try {
      process.kill(victim.pid, "SIGKILL");
      kills++;
    } catch {
      // Gone already.
    }
  }, KILL_EVERY_MS);
  const begun = Date.now();
  try {
    await queue.addBulk(
      Array.from({ length: JOBS }, (_, i) => ({
        name: "double",
        data: { value: i },
        opts: {
          jobId: `job-${i}`,
          attempts: 5,
          backoff: { type: "fixed", delay: 50 },
        },
      })),
    );
    const deadline = Date.now() + 240_000;
    while (completed + failed < JOBS && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    clearInterval(killer);
    await worker.close();
    await queue.obliterate({ force: true });
    await queue.close();
  }
  const applied = readdirSync(dir).filter((f) => f.startsWith("job-"));
  const runs = readFileSync(join(dir, "runs.log"), "utf8").trim().split("\n");
  const stats = p.stats();
  console.log(
    `${completed} jobs completed, ${failed} failed in ${
      Date.now() - begun
    } ms (${retried} retried by BullMQ); ${kills} workers killed, ${stats.crashed} crashes seen; ` +
      `${runs.length} runs for ${applied.length} effects`,
  );
  check(completed === JOBS, `all ${JOBS} jobs completed (${completed})`);
  check(failed === 0, "no job failed");
  check(applied.length === JOBS, "every job's effect applied exactly once");
  check(kills > 0 && stats.crashed > 0, "workers were killed meanwhile");
} finally {
  execFileSync("bash", [script, "stop", redisDir]);
  rmSync(dir, { recursive: true, force: true });
}
// close() above has settled: every worker process is gone.
check(liveWorkers().length === 0, "no worker process is left");
if (failures > 0) process.exit(1);
console.log("no worker process left; redis stopped");
