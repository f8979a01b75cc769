// deno-lint-ignore-file no-console
/**
 * The benchmark: every scenario of issue 6 against the floor (a hand-written
 * stdio loop in the same runtime), the machine's limit (a C pipe ping-pong)
 * and the peers (Bun.spawn ipc, Node fork ipc, tinypool, superjson), on Deno
 * and on Bun. Each scenario runs in rounds; every round runs each contender
 * once, in a fresh process, one after another, so that a noisy machine slows
 * them alike; the report gives medians over rounds. Regenerates
 * docs/benchmarks.md and docs/benchmarks.svg.
 *
 * ```sh
 * deno task bench                       # full run, rewrites the docs
 * deno task bench --smoke               # CI: a few iterations, no timing claims, no docs
 * bun scripts/bench/main.ts             # the same, orchestrated from Bun
 * deno task bench --only=rtt,throughput --rounds=3 --no-docs
 * ```
 *
 * Needs `bun` (node_modules/.bin), `node` and `cc` on the machine.
 *
 * @module
 */

import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { cpus, loadavg, release, tmpdir, totalmem } from "node:os";
import { delimiter, join } from "node:path";
import process from "node:process";
import {
  type Job,
  jobsOf,
  type ScenarioId,
  SCENARIOS,
  type Settings,
} from "./_plan.ts";
import { type Environment, renderMarkdown, renderSvg } from "./_report.ts";

const root = new URL("../../", import.meta.url).pathname;
const benchDir = new URL("./", import.meta.url).pathname;

interface Args {
  smoke: boolean;
  rounds: number | undefined;
  only: ScenarioId[] | undefined;
  docs: boolean;
  runtimes: ("deno" | "bun")[];
}

function parseArgs(argv: readonly string[]): Args {
  const args: Args = {
    smoke: false,
    rounds: undefined,
    only: undefined,
    docs: true,
    runtimes: ["deno", "bun"],
  };
  for (const arg of argv) {
    const [flag, value] = arg.split("=", 2);
    switch (flag) {
      case "--smoke":
        args.smoke = true;
        break;
      case "--rounds":
        args.rounds = Number(value);
        break;
      case "--only":
        args.only = (value ?? "").split(",") as ScenarioId[];
        break;
      case "--no-docs":
        args.docs = false;
        break;
      case "--runtimes":
        args.runtimes = (value ?? "").split(",") as ("deno" | "bun")[];
        break;
      default:
        throw new Error(
          `Unknown argument "${arg}": use --smoke, --rounds=N, --only=rtt,throughput,..., --no-docs, --runtimes=deno,bun`,
        );
    }
  }
  for (const id of args.only ?? []) {
    if (!SCENARIOS.includes(id)) {
      throw new Error(
        `Unknown scenario "${id}": choose from ${SCENARIOS.join(", ")}`,
      );
    }
  }
  return args;
}

function findProgram(name: string): string | undefined {
  for (
    const dir of [
      join(root, "node_modules", ".bin"),
      ...(process.env.PATH ?? "").split(delimiter),
    ]
  ) {
    if (!dir) continue;
    const candidate = join(dir, name);
    if (existsSync(candidate)) return candidate;
  }
  return undefined;
}

function firstLine(argv: string[]): string {
  const result = spawnSync(argv[0] as string, argv.slice(1), {
    encoding: "utf8",
  });
  return `${result.stdout ?? ""}${result.stderr ?? ""}`.split("\n")[0]
    ?.trim() ??
    "";
}

function cpuModel(): string {
  try {
    const info = readFileSync("/proc/cpuinfo", "utf8");
    return /model name\s*:\s*(.+)/.exec(info)?.[1]?.trim() ??
      cpus()[0]?.model ?? "unknown";
  } catch {
    return cpus()[0]?.model ?? "unknown";
  }
}

/** Pids of live processes carrying this run's marker in their environment. */
function markedPids(marker: string): number[] {
  const found: number[] = [];
  const needle = `AIRLOCK_BENCH_RUN=${marker}`;
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const pid = Number(entry);
    if (pid === process.pid) continue;
    try {
      const environ = readFileSync(`/proc/${entry}/environ`, "utf8");
      if (environ.split("\0").includes(needle)) found.push(pid);
    } catch {
      // Gone, or not ours to read.
    }
  }
  return found;
}

interface Programs {
  deno: string;
  bun: string;
  node: string;
  cc: string;
  pingpong: string;
  /** Pins the one-core jobs; without it they are skipped. */
  taskset: string | undefined;
}

function argvOf(job: Job, programs: Programs): string[] {
  const argv = hostArgv(job, programs);
  // Pinned jobs start on core 0; a "two-cores" job moves its other side to
  // core 1 itself (driver.ts, node_ipc.mjs, pingpong's "split").
  return job.placement && programs.taskset
    ? [programs.taskset, "-c", "0", ...argv]
    : argv;
}

function hostArgv(job: Job, programs: Programs): string[] {
  const config = JSON.stringify(job.config);
  switch (job.host) {
    case "deno":
      return [programs.deno, "run", "-A", join(benchDir, "driver.ts"), config];
    case "bun":
      return [programs.bun, join(benchDir, "driver.ts"), config];
    case "node":
      return [
        programs.node,
        join(
          benchDir,
          job.contender === "tinypool" ? "tinypool_pool.mjs" : "node_ipc.mjs",
        ),
        config,
      ];
    case "c": {
      const c = job.config as {
        warmup: number;
        iterations: number;
        split?: boolean;
      };
      return [
        programs.pingpong,
        String(c.warmup),
        String(c.iterations),
        ...(c.split ? ["split"] : []),
      ];
    }
  }
}

/** Runs one job; returns its result object or throws with its output. */
function runJob(
  job: Job,
  programs: Programs,
  env: Record<string, string>,
  timeoutMs: number,
): Record<string, unknown> {
  const argv = argvOf(job, programs);
  const result = spawnSync(argv[0] as string, argv.slice(1), {
    cwd: root,
    env,
    encoding: "utf8",
    timeout: timeoutMs,
    killSignal: "SIGKILL",
    maxBuffer: 16 * 1024 * 1024,
  });
  const lines = (result.stdout ?? "").trim().split("\n");
  const last = lines.at(-1) ?? "";
  if (result.status !== 0 || !last.startsWith("{")) {
    throw new Error(
      `${job.key} failed (exit ${result.status ?? result.signal}): ${
        (result.stderr ?? "").trim().split("\n").slice(-6).join("\n")
      }`,
    );
  }
  const parsed = JSON.parse(last) as Record<string, unknown>;
  return (parsed.result ?? parsed) as Record<string, unknown>;
}

/** The per-round results of every job, by job key. */
export type Results = Map<string, Record<string, unknown>[]>;

function main(): void {
  const args = parseArgs(process.argv.slice(2));
  const startedAt = new Date();
  const settings: Settings = {
    smoke: args.smoke,
    rounds: args.rounds ?? (args.smoke ? 1 : 5),
  };
  const deno = findProgram("deno");
  const bun = findProgram("bun");
  const node = findProgram("node");
  const cc = findProgram("cc") ?? findProgram("gcc");
  const missing = [
    ["deno", deno],
    ["bun", bun],
    ["node", node],
    ["cc", cc],
  ].filter(([, path]) => path === undefined).map(([name]) => name);
  if (missing.length > 0) {
    throw new Error(
      `Cannot run the benchmark: ${
        missing.join(", ")
      } not found (npm ci installs deno and bun; node and cc come from the machine)`,
    );
  }
  const work = mkdtempSync(join(tmpdir(), "airlock-bench-"));
  const marker = `${process.pid}-${Date.now()}`;
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined) env[name] = value;
  }
  env.AIRLOCK_BENCH_RUN = marker;
  env.NO_COLOR = "1";
  const failures: string[] = [];
  const results: Results = new Map();
  const jobs: Job[] = [];
  try {
    const pingpong = join(work, "pingpong");
    const compiled = spawnSync(cc as string, [
      "-O2",
      "-o",
      pingpong,
      join(benchDir, "pingpong.c"),
    ], { encoding: "utf8" });
    if (compiled.status !== 0) {
      throw new Error(`Cannot compile pingpong.c: ${compiled.stderr}`);
    }
    const programs: Programs = {
      deno: deno as string,
      bun: bun as string,
      node: node as string,
      cc: cc as string,
      pingpong,
      taskset: findProgram("taskset"),
    };
    const environment: Environment = {
      date: startedAt.toISOString(),
      deno: firstLine([programs.deno, "--version"]),
      bun: `bun ${firstLine([programs.bun, "--version"])}`,
      node: `node ${firstLine([programs.node, "--version"])}`,
      cc: firstLine([programs.cc, "--version"]),
      cpu: cpuModel(),
      cores: cpus().length,
      memoryGiB: totalmem() / 2 ** 30,
      kernel: release(),
      loadBefore: loadavg(),
      loadAfter: [],
      rounds: settings.rounds,
      durationS: 0,
    };
    const scenarios = args.only ?? [...SCENARIOS];
    console.log(
      `airlock bench${settings.smoke ? " (smoke)" : ""}: ${
        scenarios.join(", ")
      }; ${settings.rounds} round(s); load ${
        loadavg().map((v) => v.toFixed(2)).join(" ")
      }`,
    );
    const timeoutMs = settings.smoke ? 60_000 : 600_000;
    for (const scenario of scenarios) {
      const scenarioJobs = jobsOf(scenario, args.runtimes, settings);
      jobs.push(...scenarioJobs);
      const started = performance.now();
      for (let round = 1; round <= settings.rounds; round++) {
        for (const job of scenarioJobs) {
          if (job.placement && !programs.taskset) continue;
          try {
            const result = runJob(job, programs, env, timeoutMs);
            const list = results.get(job.key) ?? [];
            list.push(result);
            results.set(job.key, list);
          } catch (error: unknown) {
            const message = error instanceof Error
              ? error.message
              : String(error);
            failures.push(message);
            console.error(`  ${message}`);
          }
        }
      }
      console.log(
        `  ${scenario}: ${scenarioJobs.length} contenders x ${settings.rounds} round(s) in ${
          ((performance.now() - started) / 1000).toFixed(1)
        } s`,
      );
    }
    environment.loadAfter = loadavg();
    environment.durationS = (Date.now() - startedAt.getTime()) / 1000;
    const markdown = renderMarkdown(jobs, results, environment, settings);
    if (settings.smoke) {
      console.log(
        "Smoke run: every scenario ran and every echo was checked; no timing claims, docs untouched.",
      );
    } else {
      console.log(markdown);
      if (args.docs) {
        writeFileSync(join(root, "docs", "benchmarks.md"), markdown);
        writeFileSync(
          join(root, "docs", "benchmarks.svg"),
          renderSvg(jobs, results, environment),
        );
        console.log("Wrote docs/benchmarks.md and docs/benchmarks.svg");
      }
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
    // Every process this run started carries the marker: none may be left.
    const leftovers = markedPids(marker);
    for (const pid of leftovers) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    if (leftovers.length > 0) {
      failures.push(
        `${leftovers.length} process(es) outlived their benchmark and were killed: ${
          leftovers.join(", ")
        }`,
      );
    }
  }
  if (failures.length > 0) {
    console.error(`\n${failures.length} failure(s):\n${failures.join("\n")}`);
    process.exit(1);
  }
}

main();
