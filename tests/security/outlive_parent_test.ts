// Attack class: a worker that outlives its parent. Where Landlock is the
// only backend, no pid namespace ends a worker's tree with the parent: only
// the parent-death signal `setpriv --pdeathsig KILL` sets, and the end of
// its stdin. A worker (Deno with `ffi`; any Bun worker, through bun:ffi)
// cleared the signal with `prctl(PR_SET_PDEATHSIG, 0)`, stubbed out its
// exits and lived on, adopted by init, after its parent's SIGKILL. Fixed:
// there the seccomp filter refuses `prctl(PR_SET_PDEATHSIG)` and, without
// a `run` grant, every new process (a child has no parent-death signal).
// Under bubblewrap the shared pid namespace's end kills it either way.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { fixture } from "../_helpers/files.ts";
import { isAlive } from "../_helpers/processes.ts";
import { RUNTIME, scriptArgs } from "../_helpers/runtime.ts";
import { until } from "../_helpers/wait.ts";
import { sandboxSkip } from "./_sandbox.ts";

interface Report {
  pid: number;
  prctl: { result: number; errno: number };
  fork: { result: number; errno: number };
}

describe("a worker that tries to outlive its parent", {
  skip: sandboxSkip(),
}, () => {
  test(`a ${RUNTIME} worker that clears its parent-death signal still dies with its parent`, async () => {
    const script = fixture("security/outlive_parent.ts").pathname;
    const parent = spawn(
      process.execPath,
      scriptArgs(script),
      { stdio: ["ignore", "pipe", "inherit"], env: process.env },
    );
    const exited = new Promise<void>((resolve) =>
      parent.once("exit", () => resolve())
    );
    let report: Report | undefined;
    try {
      let out = "";
      parent.stdout.setEncoding("utf8");
      parent.stdout.on("data", (chunk: string) => (out += chunk));
      await until(() => out.includes("\n"), 90_000, "the parent's report");
      report = JSON.parse(out.split("\n")[0] ?? "") as Report;
      assert.ok(isAlive(report.pid), "the worker runs");
      // Neither call may leave a process the parent's death does not end.
      assert.notEqual(report.fork.result, 0);
      parent.kill("SIGKILL");
      await exited;
      const pid = report.pid;
      await until(() => !isAlive(pid), 5_000, `worker ${pid} gone`);
    } finally {
      parent.kill("SIGKILL");
      await exited;
      // Never left behind, whatever the outcome.
      if (report !== undefined && isAlive(report.pid)) {
        process.kill(report.pid, "SIGKILL");
      }
    }
    // Where the filter refuses them (Landlock alone), both calls failed
    // with EPERM; inside bubblewrap they may succeed (fork's child _exits).
    for (const call of [report.prctl, report.fork]) {
      assert.ok(call.result === 0 || call.result > 0 || call.errno === 1);
    }
  });
});
