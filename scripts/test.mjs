// The whole suite (`deno task test`): every test file under tests/ on Deno
// and on Bun, several test processes at once, and the JSDoc examples on
// Deno. Plain Node.js, like install.mjs.
//
//   node scripts/test.mjs [deno] [bun] [-- file ...]
//
// Each file runs in a test process of its own, up to AIRLOCK_TEST_JOBS
// processes at once (unless set, three per core: 6 on 2): most of a
// file's time is spent waiting on worker processes, not on the CPU. Its
// output is printed whole once it ends. A process of its own also keeps a
// file's process-wide state (environment variables, child processes, which
// checkNoLeaks() counts) its own, as Deno does by running each file in an
// isolate of its own. The files in HEAVY keep both cores busy: one of them
// at a time. The files in SERIAL run after all the others, one at a time
// with nothing else of the suite running: they measure what other
// processes would disturb.
//
// Deno type-checks the whole suite once (`deno check --doc`, as one more
// process beside the first files); Deno's test processes run with
// --no-check. The closing lines sum up each runner in the form it prints
// itself (Deno: "ok | N passed (M steps) | K failed", Bun: " N pass",
// " K fail"), which .ci/run parses, then name the slowest files.
//
// AIRLOCK_TEST_CPU=1 adds each test process's CPU time to its line, and
// the sum to the last: from a cgroup v1 cpuacct group of its own where this
// may make one (root), which counts the sandboxed workers too; else from
// /usr/bin/time, which misses those reaped inside their pid namespace.
import { spawn } from "node:child_process";
import {
  accessSync,
  constants,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
} from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

const DENO = "node_modules/.bin/deno";
const BUN = "node_modules/.bin/bun";

/**
 * The modules whose JSDoc examples run as tests on Deno (`--doc`): src/
 * and the package's entry points (deno.json `exports`).
 */
const DOC_ROOTS = [
  "src/",
  ...Object.values(JSON.parse(readFileSync("deno.json", "utf8")).exports)
    .map((path) => path.replace(/^\.\//, "")),
];

/**
 * Files that start first, so that the run does not end on one of them
 * alone (a hint only: a file missing here just starts in its turn). The
 * slowest of a whole run at load 15 to 23, 65 to 390 s each.
 */
const SLOW_FIRST = [
  "tests/reliability/parent_death_test.ts",
  "tests/reliability/chaos_test.ts",
  "tests/parent/learn_test.ts",
  "tests/parent/pool_ssh_hosts_test.ts",
  "tests/reliability/parent_signal_test.ts",
  "tests/security/net_host_test.ts",
  "tests/conformance/python_test.ts",
  "tests/protocol/decode_value_test.ts",
  "tests/parent/exit_test.ts",
  "tests/parent/transport_test.ts",
  "tests/security/limits_test.ts",
];

/**
 * Files that keep both cores busy for long (workers spinning in synchronous
 * code, hundreds of worker starts): one of them at a time, on either
 * runner, beside the other files.
 */
const HEAVY = [
  "tests/reliability/chaos_test.ts",
  "tests/reliability/parent_death_test.ts",
];

/** Files that run alone, after the others (see the head of this file). */
const SERIAL = [];

/** Every test file under `dir` (the names both runners collect), sorted. */
function testFiles(dir) {
  const found = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== "node_modules") found.push(...testFiles(path));
    } else if (/[._](test|spec)\.[cm]?[jt]sx?$/.test(entry.name)) {
      found.push(path);
    }
  }
  return found.sort();
}

let timed = 0;

/**
 * The cgroup v1 cpuacct hierarchy, when this process may make groups in it
 * (root, as in CI). Its figure counts every process under a test process,
 * sandboxed workers reaped inside their pid namespace included (airlock's
 * own limits move workers in the memory and pids hierarchies only), which
 * /usr/bin/time misses: a file whose workers spin showed a tenth of its
 * CPU that way.
 */
const CPUACCT = "/sys/fs/cgroup/cpuacct";

function cpuacctUsable() {
  try {
    accessSync(join(CPUACCT, "cpuacct.usage"), constants.R_OK);
    accessSync(CPUACCT, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** How AIRLOCK_TEST_CPU=1 measures: "cgroup", "time", or undefined. */
const cpuBy = process.env.AIRLOCK_TEST_CPU === "1"
  ? (cpuacctUsable() ? "cgroup" : "time")
  : undefined;

/** Spawns `program` in a fresh cpuacct group `group`. */
function spawnInGroup(group, program, args) {
  mkdirSync(group);
  return spawn(
    "/bin/sh",
    [
      "-c",
      'echo $$ > "$0/cgroup.procs" && exec "$@"',
      group,
      program,
      ...args,
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
}

/** The CPU seconds group `group` used; removes it. */
function groupCpu(group) {
  try {
    return Number(readFileSync(join(group, "cpuacct.usage"), "utf8")) / 1e9;
  } catch {
    return undefined;
  } finally {
    try {
      rmdirSync(group);
    } catch {
      // A process still in it (the group stays; it is empty once they end).
    }
  }
}

/**
 * Runs `program`; resolves with its exit status, output, wall time and,
 * with AIRLOCK_TEST_CPU=1, the CPU time of it and everything under it
 * (from a cpuacct cgroup of its own where that can be made, else from
 * /usr/bin/time, which misses the workers reaped in their pid namespace).
 */
function run(program, args) {
  return new Promise((resolve) => {
    const begun = Date.now();
    const name = `airlock-test-cpu-${process.pid}-${timed++}`;
    const cpuFile = cpuBy === "time" ? join(tmpdir(), name) : undefined;
    const group = cpuBy === "cgroup" ? join(CPUACCT, name) : undefined;
    const child = group !== undefined
      ? spawnInGroup(group, program, args)
      : cpuFile === undefined
      ? spawn(program, args, { stdio: ["ignore", "pipe", "pipe"] })
      : spawn(
        "/usr/bin/time",
        ["-o", cpuFile, "-f", "%U %S", program, ...args],
        {
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
    const chunks = [];
    child.stdout.on("data", (chunk) => chunks.push(chunk));
    child.stderr.on("data", (chunk) => chunks.push(chunk));
    child.on("error", (error) => {
      chunks.push(Buffer.from(`cannot run ${program}: ${error.message}\n`));
    });
    child.on("close", (code, signal) => {
      let cpu = group === undefined ? undefined : groupCpu(group);
      if (cpuFile !== undefined) {
        try {
          const [user, system] = readFileSync(cpuFile, "utf8").trim()
            .split("\n").at(-1).split(" ").map(Number);
          cpu = user + system;
          rmSync(cpuFile);
        } catch {
          // No figure.
        }
      }
      resolve({
        cpu,
        code: code ?? 1,
        signal,
        output: Buffer.concat(chunks).toString("utf8"),
        seconds: (Date.now() - begun) / 1000,
      });
    });
  });
}

/** Strips terminal colours (for parsing only; the output is printed as is). */
function plain(text) {
  // deno-lint-ignore no-control-regex
  return text.replace(/\x1b\[[0-9;]*m/g, "");
}

/** Deno's closing line: "ok | 3 passed (4 steps) | 1 failed (2 steps)". */
function denoCounts(output) {
  const line = plain(output).split("\n").filter((text) =>
    /^(ok|FAILED) \| \d+ passed/.test(text)
  ).at(-1);
  if (line === undefined) return undefined;
  const passed = /(\d+) passed(?: \((\d+) steps?\))?/.exec(line);
  const failed = /(\d+) failed(?: \((\d+) steps?\))?/.exec(line);
  return {
    passed: Number(passed?.[1] ?? 0),
    passedSteps: Number(passed?.[2] ?? 0),
    failed: Number(failed?.[1] ?? 0),
    failedSteps: Number(failed?.[2] ?? 0),
  };
}

/** Bun's closing lines: " 3 pass", " 1 fail". */
function bunCounts(output) {
  const text = plain(output);
  const passed = [...text.matchAll(/^ *(\d+) pass$/gm)].at(-1);
  const failed = [...text.matchAll(/^ *(\d+) fail$/gm)].at(-1);
  if (passed === undefined || failed === undefined) return undefined;
  return { passed: Number(passed[1]), failed: Number(failed[1]) };
}

/** One test process: files (or JSDoc examples) on one runner. */
function testJob(runner, files, label) {
  return runner === "deno"
    ? {
      runner,
      label,
      program: DENO,
      args: ["test", "-A", "--no-check", "--doc", ...files],
    }
    : {
      runner,
      label,
      program: BUN,
      // Bun takes a path filter unless it starts with "./".
      args: ["test", "--timeout", "120000", ...files.map((f) => `./${f}`)],
    };
}

/**
 * Runs `jobs` in order, up to `limit` at once and at most one of HEAVY at a
 * time; resolves with the results, in the order the jobs ended.
 */
async function runAll(jobs, limit) {
  const results = [];
  const queue = [...jobs];
  let heavyRunning = false;
  const lane = async () => {
    while (queue.length > 0) {
      const index = heavyRunning
        ? queue.findIndex((j) => !HEAVY.includes(j.label))
        : 0;
      // Only heavy ones left while one runs: this lane has nothing to do.
      if (index < 0) return;
      const [current] = queue.splice(index, 1);
      const heavy = HEAVY.includes(current.label);
      if (heavy) heavyRunning = true;
      const result = await run(current.program, current.args);
      if (heavy) heavyRunning = false;
      const status = result.code === 0
        ? ""
        : `, exit ${result.signal ?? result.code}`;
      process.stdout.write(
        `\n== ${current.runner} ${current.label} (${
          result.seconds.toFixed(1)
        } s${
          result.cpu === undefined ? "" : `, cpu ${result.cpu.toFixed(1)} s`
        }${status})\n${result.output}`,
      );
      results.push({ ...current, ...result });
    }
  };
  await Promise.all(Array.from({ length: limit }, lane));
  return results;
}

const argv = process.argv.slice(2);
const split = argv.indexOf("--");
const runners = (split < 0 ? argv : argv.slice(0, split)).filter((arg) =>
  arg === "deno" || arg === "bun"
);
if (runners.length === 0) runners.push("deno", "bun");
const chosen = split < 0 ? undefined : argv.slice(split + 1);
const files = chosen ?? testFiles("tests");
const limit = Number(
  process.env.AIRLOCK_TEST_JOBS ?? Math.max(2, 3 * availableParallelism()),
);
if (!Number.isInteger(limit) || limit < 1) {
  process.stderr.write(
    `test: AIRLOCK_TEST_JOBS must be a whole number of at least 1, not ${
      JSON.stringify(process.env.AIRLOCK_TEST_JOBS)
    }\n`,
  );
  process.exit(2);
}

const started = Date.now();
const check = {
  runner: "deno",
  label: "type check",
  program: DENO,
  args: ["check", "--doc", ...files, ...(chosen ? [] : DOC_ROOTS)],
  counted: false,
};
const first = [
  ...SLOW_FIRST.filter((file) => files.includes(file)),
  ...files.filter((file) => !SLOW_FIRST.includes(file)),
].filter((file) => !SERIAL.includes(file));
const last = files.filter((file) => SERIAL.includes(file));
/** Each file on each runner, interleaved. */
const jobsOf = (list) =>
  list.flatMap((file) =>
    runners.map((runner) => testJob(runner, [file], file))
  );
const jobs = [...(runners.includes("deno") ? [check] : []), ...jobsOf(first)];
if (runners.includes("deno") && chosen === undefined) {
  // Among the first (100 s at load 20 once, last: the run ended on it).
  jobs.splice(
    1 + 2 * SLOW_FIRST.length,
    0,
    testJob("deno", DOC_ROOTS, "JSDoc examples"),
  );
}
const results = await runAll(jobs, limit);
const checked = results.find((result) => result.counted === false);
results.push(...await runAll(jobsOf(last), 1));

const seconds = ((Date.now() - started) / 1000).toFixed(0);
let failedAny = false;
process.stdout.write("\n");
for (const runner of runners) {
  const mine = results.filter((result) =>
    result.runner === runner && result.counted !== false
  );
  const broken = [];
  if (runner === "deno" && checked?.code !== 0) broken.push(check.label);
  const sum = { passed: 0, passedSteps: 0, failed: 0, failedSteps: 0 };
  for (const result of mine) {
    const counts = runner === "deno"
      ? denoCounts(result.output)
      : bunCounts(result.output);
    if (counts === undefined || result.code !== 0) broken.push(result.label);
    if (counts === undefined) {
      // No closing line (it crashed, or never ran): one failed test.
      sum.failed += 1;
      continue;
    }
    for (const key of Object.keys(counts)) sum[key] += counts[key];
  }
  if (broken.length > 0) failedAny = true;
  process.stdout.write(
    `${runner}: ${mine.length} test processes, ${
      broken.length === 0 ? "all passed" : `failed: ${broken.join(", ")}`
    }\n`,
  );
  if (runner === "deno") {
    const steps = (n) => ` (${n} step${n === 1 ? "" : "s"})`;
    process.stdout.write(
      `${broken.length === 0 ? "ok" : "FAILED"} | ${sum.passed} passed${
        steps(sum.passedSteps)
      } | ${sum.failed} failed${
        sum.failedSteps > 0 ? steps(sum.failedSteps) : ""
      } (${seconds}s)\n`,
    );
  } else {
    process.stdout.write(` ${sum.passed} pass\n ${sum.failed} fail\n`);
  }
}
const slowest = results.filter((result) => result.counted !== false)
  .sort((a, b) => b.seconds - a.seconds).slice(0, 8);
process.stdout.write(
  `slowest: ${
    slowest.map((r) => `${r.runner} ${r.label} ${r.seconds.toFixed(0)} s`)
      .join(", ")
  }\nwhole suite: ${seconds} s wall, ${limit} test processes at once${
    cpuBy === undefined
      ? ""
      : `, ${
        results.reduce((sum, result) => sum + (result.cpu ?? 0), 0).toFixed(0)
      } s CPU (by ${cpuBy})`
  }\n`,
);
process.exit(failedAny ? 1 : 0);
