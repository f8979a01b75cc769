// `this.pid` in a handler is the pid the parent reports the worker under
// (issue 28, item 6): inside the sandbox's pid namespace `process.pid` is
// not it, so a worker could not match its own logs to the parent's records.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { pool, session } from "../../mod.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { until } from "../_helpers/wait.ts";
import { needsWorkers } from "../_helpers/tools.ts";

checkNoLeaks();

const worker = fixture("pid_worker.ts");

for (const runtime of ["deno", "bun"] as const) {
  describe(`this.pid on ${runtime}`, needsWorkers(runtime), () => {
    test(`this.pid is the session's pid and the pid its log lines are reported under (${runtime})`, async () => {
      const logged: { line: string; pid: number }[] = [];
      await using s = await session(worker, {
        runtime,
        onStderr: (line, source) => logged.push({ line, pid: source.pid }),
      });
      const answer = await s.call("whoAmI", []) as { pid: number; own: number };
      assert.equal(answer.pid, s.pid);
      await until(
        () => logged.some((l) => l.line.startsWith("pid-line")),
        15_000,
        "the log line",
      );
      const line = logged.find((l) => l.line.startsWith("pid-line"))!;
      assert.equal(line.line, `pid-line ${s.pid}`);
      assert.equal(line.pid, s.pid);
    });

    test(`this.pid in a pool is each worker's own reported pid (${runtime})`, async () => {
      await using p = pool(worker, {
        runtime,
        max: 2,
        min: 2,
        prewarm: 2,
        onStderr: () => {},
      });
      await until(() => p.stats().workers === 2, 30_000, "two workers");
      const pids = new Set(p.stats().perWorker.map((w) => w.pid));
      const answers = await Promise.all(
        [0, 1, 2, 3].map(() =>
          p.call("whoAmI", []) as Promise<{ pid: number }>
        ),
      );
      for (const answer of answers) assert.ok(pids.has(answer.pid));
    });
  });
}
