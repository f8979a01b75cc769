/**
 * The chaos driver shared by the chaos tests and the soak script: keeps a
 * number of calls in flight against a session or pool while workers die
 * (they SIGKILL themselves on request, and a killer SIGKILLs them from
 * outside by pid), then checks that the books balance: every call settled
 * once, with its own answer or a crash error; idempotent calls all
 * succeeded; no non-idempotent call ran twice.
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { WorkerCrashedError } from "../../mod.ts";
import type { Fate } from "../fixtures/reliability/chaos_worker.ts";

/** A seeded pseudo-random generator (mulberry32): floats in [0, 1). */
export type Random = () => number;

/**
 * A seeded pseudo-random generator.
 *
 * @param seed Any 32-bit integer.
 * @returns The generator.
 */
export function seeded(seed: number): Random {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The seed of this run: `AIRLOCK_CHAOS_SEED` when set (to replay a failure),
 * else a fresh one.
 *
 * @returns The seed.
 */
export function chaosSeed(): number {
  const given = process.env.AIRLOCK_CHAOS_SEED;
  if (given !== undefined && given !== "") return Number(given) >>> 0;
  return (Date.now() ^ (process.pid << 16)) >>> 0;
}

/** What the driver calls. */
export interface ChaosTarget {
  /** A session's or pool's `call`. */
  call(
    op: string,
    args: unknown[],
    options: { timeoutMs?: number },
  ): Promise<unknown>;
  /**
   * Pids the killer may shoot: live workers that have answered at least one
   * call since they started. A crash at a random moment of a worker's
   * service is what the run models; a killer that shoots each new worker
   * before it can answer anything (under load a start, and the first calls
   * after it, are slow) would defeat any finite `maxRetries`, library or not.
   */
  pids(): number[];
  /** Called every `disruptEvery` calls without waiting (e.g. `restart()`). */
  disrupt?(): Promise<void>;
}

/** How hard to shake. */
export interface ChaosOptions {
  /** Calls to make. */
  calls: number;
  /** Calls kept in flight. */
  inFlight: number;
  /** The seed. */
  seed: number;
  /** A directory the worker may write (its execution logs). */
  dir: string;
  /** Deadline of each call, from when it is made, in ms. */
  callDeadlineMs: number;
  /** Chance that a call kills its worker (split over the fates). */
  selfKillRate: number;
  /** Pause between kills from outside, in ms: [min, max). 0 disables the killer. */
  killEveryMs?: readonly [number, number];
  /**
   * Calls settled between two kills from outside: [min, max). The run's
   * kills then scale with its calls, not with how slow the machine is (by
   * the clock, a slow machine kills each worker soon after it serves, and
   * the run grows without bound).
   */
  killEveryCalls?: readonly [number, number];
  /** Calls between two `target.disrupt()`. */
  disruptEvery?: number;
}

/** The books of one chaos run. */
export interface ChaosReport {
  /** Calls made. */
  sent: number;
  /** Calls that resolved with their own answer. */
  ok: number;
  /** Calls that rejected with WorkerCrashedError. */
  crashed: number;
  /** Calls that settled otherwise (wrong answer, another error). */
  other: number;
  /** Calls still pending at their deadline. */
  hung: number;
  /** Calls asked to kill their worker. */
  selfKills: number;
  /** Workers killed from outside. */
  externalKills: number;
  /** Idempotent calls seen to execute more than once (a lower bound of retries). */
  retried: number;
  /** Executions of the non-idempotent op, from its log. */
  executed: number;
  /** Non-idempotent calls that resolved. */
  okWrites: number;
  /** Non-idempotent calls that crashed after their side effect ran. */
  crashedAfterEffect: number;
  /** Crashed non-idempotent calls whose error said `executed: "no"` (never ran). */
  crashedUnrun: number;
  /** Times `target.disrupt()` ran. */
  disruptions: number;
  /** Most calls in flight at once. */
  maxInFlight: number;
  /** Wall time. */
  elapsedMs: number;
  /** Every way the books failed to balance (empty when they do). */
  problems: string[];
}

interface Planned {
  op: "read" | "peek" | "write";
  token: string;
  value: number;
  fate: Fate;
  dieOnce: boolean;
  outcome?: "ok" | "crashed" | "other" | "hung";
  error?: unknown;
}

function countLines(path: string): Map<string, number> {
  const counts = new Map<string, number>();
  let text = "";
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return counts;
  }
  for (const line of text.split("\n")) {
    if (line) counts.set(line, (counts.get(line) ?? 0) + 1);
  }
  return counts;
}

function plan(random: Random, index: number, options: ChaosOptions): Planned {
  const token = `t${index}`;
  const roll = random();
  const kill = random() < options.selfKillRate;
  if (roll < 0.4) {
    return { op: "read", token, value: index, fate: "none", dieOnce: kill };
  }
  if (roll < 0.55) {
    return { op: "peek", token, value: index, fate: "none", dieOnce: false };
  }
  const fates: Fate[] = ["before", "after-effect", "after-reply"];
  const fate = kill ? fates[Math.floor(random() * 3)] ?? "before" : "none";
  return { op: "write", token, value: index, fate, dieOnce: false };
}

function args(call: Planned, dir: string): unknown[] {
  switch (call.op) {
    case "read":
      return [dir, call.token, call.value, call.dieOnce];
    case "peek":
      return [dir, call.token, call.value];
    case "write":
      return [dir, call.token, call.value, call.fate];
  }
}

function deadline<T>(promise: Promise<T>, ms: number): Promise<T | "hung"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<"hung">((resolve) => {
      timer = setTimeout(() => resolve("hung"), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/**
 * Runs the chaos and balances the books.
 *
 * @param target The session or pool.
 * @param options How hard to shake.
 * @returns The report.
 */
export async function runChaos(
  target: ChaosTarget,
  options: ChaosOptions,
): Promise<ChaosReport> {
  const random = seeded(options.seed);
  const killRandom = seeded(options.seed ^ 0x5bd1e995);
  const calls: Planned[] = [];
  const started = performance.now();
  let inFlight = 0;
  let maxInFlight = 0;
  let externalKills = 0;
  let running = true;

  const killOne = (): void => {
    const pids = target.pids();
    const pid = pids[Math.floor(killRandom() * pids.length)];
    if (pid === undefined) return;
    try {
      process.kill(pid, "SIGKILL");
      externalKills++;
    } catch {
      // Already gone.
    }
  };
  const killer = (async () => {
    const [least, most] = options.killEveryMs ?? [0, 0];
    if (most <= 0) return;
    while (running) {
      const pause = least + killRandom() * (most - least);
      await new Promise((resolve) => setTimeout(resolve, pause));
      if (running) killOne();
    }
  })();
  const [leastCalls, mostCalls] = options.killEveryCalls ?? [0, 0];
  const callsToKill = (): number =>
    mostCalls <= 0 ? Infinity : Math.max(
      1,
      Math.floor(leastCalls + killRandom() * (mostCalls - leastCalls)),
    );
  let settled = 0;
  let killAt = callsToKill();

  const one = async (call: Planned): Promise<void> => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    try {
      const result = await deadline(
        target.call(call.op, args(call, options.dir), {
          timeoutMs: options.callDeadlineMs,
        }),
        options.callDeadlineMs + 5_000,
      );
      if (result === "hung") {
        call.outcome = "hung";
      } else if (result === `${call.token}:${call.value * 2}`) {
        call.outcome = "ok";
      } else {
        call.outcome = "other";
        call.error = `wrong answer ${JSON.stringify(result)}`;
      }
    } catch (error: unknown) {
      call.outcome = error instanceof WorkerCrashedError ? "crashed" : "other";
      call.error = error;
    } finally {
      inFlight--;
      if (++settled >= killAt) {
        killOne();
        killAt = settled + callsToKill();
      }
    }
  };

  let next = 0;
  const disruptions: Promise<void>[] = [];
  const disruptFailures: unknown[] = [];
  const lane = async (): Promise<void> => {
    while (next < options.calls) {
      const index = next++;
      const every = options.disruptEvery ?? 0;
      if (target.disrupt && every > 0 && index > 0 && index % every === 0) {
        disruptions.push(
          target.disrupt().catch((error) => {
            disruptFailures.push(error);
          }),
        );
      }
      const call = plan(random, index, options);
      calls.push(call);
      await one(call);
    }
  };
  try {
    await Promise.all(Array.from({ length: options.inFlight }, lane));
  } finally {
    running = false;
    await killer;
    await Promise.all(disruptions);
  }

  const reads = countLines(join(options.dir, "reads.log"));
  const peeks = countLines(join(options.dir, "peeks.log"));
  const writes = countLines(join(options.dir, "writes.log"));
  const problems: string[] = [];
  const report: ChaosReport = {
    sent: calls.length,
    ok: 0,
    crashed: 0,
    other: 0,
    hung: 0,
    selfKills: 0,
    externalKills,
    retried: 0,
    executed: 0,
    okWrites: 0,
    crashedAfterEffect: 0,
    crashedUnrun: 0,
    disruptions: disruptions.length,
    maxInFlight,
    elapsedMs: Math.round(performance.now() - started),
    problems,
  };
  for (const call of calls) {
    const outcome = call.outcome ?? "hung";
    report[outcome]++;
    if (call.fate !== "none" || call.dieOnce) report.selfKills++;
    const describe = () =>
      `${call.op} ${call.token} (fate ${call.fate}${
        call.dieOnce ? ", dies once" : ""
      }): ${outcome}${call.error === undefined ? "" : ` ${call.error}`}`;
    if (outcome === "other" || outcome === "hung") {
      problems.push(describe());
      continue;
    }
    if (call.op === "write") {
      const times = writes.get(call.token) ?? 0;
      report.executed += times;
      if (times > 1) problems.push(`ran ${times} times: ${describe()}`);
      if (outcome === "ok") {
        report.okWrites++;
        if (times !== 1) problems.push(`ok but ran ${times}: ${describe()}`);
        if (call.fate === "before" || call.fate === "after-effect") {
          problems.push(`should have crashed: ${describe()}`);
        }
      } else {
        if (times === 1) report.crashedAfterEffect++;
        if (call.fate === "before" && times !== 0) {
          problems.push(`ran despite dying first: ${describe()}`);
        }
        const error = call.error as WorkerCrashedError;
        // What the error says about the handler must hold in the ledger:
        // "no" never wrote; a crash is never "yes".
        if (error.executed === "no") {
          report.crashedUnrun++;
          if (times !== 0) {
            problems.push(`executed "no" but ran ${times}: ${describe()}`);
          }
        } else if (error.executed !== "maybe") {
          problems.push(`crash with executed ${error.executed}: ${describe()}`);
        }
        if (error.op !== "write" || error.signal !== "SIGKILL") {
          problems.push(
            `crash error fields op ${error.op} signal ${error.signal}: ${describe()}`,
          );
        }
      }
    } else {
      const times = (call.op === "read" ? reads : peeks).get(call.token) ?? 0;
      if (outcome !== "ok") {
        problems.push(`idempotent call failed: ${describe()}`);
      } else if (times < 1) problems.push(`ok but never ran: ${describe()}`);
      if (times > 1 || call.dieOnce) report.retried++;
    }
  }
  for (const error of disruptFailures) {
    problems.push(`disrupt failed: ${error}`);
  }
  const unknown = [...writes.keys()].filter((token) =>
    !calls.some((call) => call.op === "write" && call.token === token)
  );
  if (unknown.length > 0) problems.push(`unknown tokens ran: ${unknown}`);
  if (report.executed !== report.okWrites + report.crashedAfterEffect) {
    problems.push(
      `executed ${report.executed} != ok writes ${report.okWrites} + crashed after effect ${report.crashedAfterEffect}`,
    );
  }
  if (report.ok + report.crashed + report.other + report.hung !== report.sent) {
    problems.push("outcomes do not add up to calls sent");
  }
  return report;
}

/**
 * One line of accounting for a report.
 *
 * @param label What ran.
 * @param seed The seed.
 * @param report The report.
 * @param workerCrashes Worker processes that died unasked (from the stats).
 * @returns The line.
 */
export function accounting(
  label: string,
  seed: number,
  report: ChaosReport,
  workerCrashes: number,
): string {
  return `chaos ${label} seed ${seed}: sent ${report.sent}, ok ${report.ok}, crashed ${report.crashed}, other ${report.other}, hung ${report.hung}; ` +
    `self-kills ${report.selfKills}, external kills ${report.externalKills}, worker crashes ${workerCrashes}, disruptions ${report.disruptions}, retried ≥ ${report.retried}; ` +
    `executed ${report.executed} = ok writes ${report.okWrites} + crashed after effect ${report.crashedAfterEffect}; crashed never run ("no") ${report.crashedUnrun}; ` +
    `max in flight ${report.maxInFlight}, ${report.elapsedMs} ms`;
}
