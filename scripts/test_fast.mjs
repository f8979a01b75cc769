// The fast tier: the protocol, unit and in-memory tests, which start no
// worker process, run on Deno and on Bun at once (`deno task test:fast`). The
// list is written here once, for both runners. Plain Node.js, like
// install.mjs.
import { spawn } from "node:child_process";
import process from "node:process";

/** The fast tier's files and folders, relative to the repository root. */
const FAST_TIER = [
  "tests/protocol/",
  "tests/runtime/permissions_test.ts",
  "tests/runtime/command_test.ts",
  "tests/runtime/sandbox_plan_test.ts",
  "tests/runtime/sandbox_bwrap_test.ts",
  "tests/runtime/sandbox_mounts_test.ts",
  "tests/runtime/launch_exit_test.ts",
  "tests/runtime/limits_decide_test.ts",
  "tests/runtime/confine_landlock_test.ts",
  "tests/runtime/confine_seccomp_test.ts",
  "tests/runtime/confine_backends_test.ts",
  "tests/worker/define_worker_test.ts",
  "tests/parent/pool_scheduling_test.ts",
  "tests/parent/pool_policy_test.ts",
  "tests/parent/session_scheduling_test.ts",
  "tests/parent/one_shot_scheduling_test.ts",
  "tests/parent/stream_scheduling_test.ts",
  "tests/parent/write_ahead_test.ts",
  "tests/parent/call_table_test.ts",
  "tests/parent/launcher_health_test.ts",
  "tests/parent/pool_launchers_scheduling_test.ts",
  "tests/testing/helpers_test.ts",
];

/**
 * Runs one runner over the list, its output gathered; resolves with its
 * status and output.
 */
function run(program, args) {
  return new Promise((resolve) => {
    const child = spawn(program, args, { stdio: ["ignore", "pipe", "pipe"] });
    const chunks = [];
    child.stdout.on("data", (chunk) => chunks.push(chunk));
    child.stderr.on("data", (chunk) => chunks.push(chunk));
    child.on("error", (error) => {
      chunks.push(
        Buffer.from(`test:fast: cannot run ${program}: ${error.message}\n`),
      );
    });
    child.on("close", (code) => {
      resolve({ code: code ?? 1, output: Buffer.concat(chunks) });
    });
  });
}

// Both runners at once (the tier is mostly CPU: one core each); Deno's
// output first, then Bun's.
const results = await Promise.all([
  run("node_modules/.bin/deno", ["test", "-A", ...FAST_TIER]),
  run("node_modules/.bin/bun", [
    "test",
    "--timeout",
    "60000",
    // Bun takes a path filter unless it starts with "./".
    ...FAST_TIER.map((path) => `./${path}`),
  ]),
]);
for (const result of results) process.stdout.write(result.output);
const failed = results.find((result) => result.code !== 0);
if (failed !== undefined) process.exit(failed.code);
