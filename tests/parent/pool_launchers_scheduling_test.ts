// pool({ launchers }) placement, health and rebalancing in memory (the
// in-memory runtime; a "host" is the launcher prefix its spawn was given,
// and a host that is down fails its workers' start). Real ssh hosts:
// pool_ssh_hosts_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { pool, WorkerCrashedError } from "../../mod.ts";
import type memory from "../fixtures/memory_worker.ts";
import { memoryWorker } from "../fixtures/memory_worker.ts";
import { type MemoryChild, memoryRuntime } from "../_memory_adapter.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { until, within } from "../_helpers/wait.ts";

const MODULE = fixture("memory_worker.ts");
const quiet = captureLog();
const HOSTS = [["host-a"], ["host-b"], ["host-c"]];

/** An in-memory runtime whose hosts can be taken down and brought back. */
function hostsRuntime() {
  const down = new Set<string>();
  const rt = memoryRuntime({
    load: (child) => {
      const host = child.request.argv[0] ?? "";
      if (down.has(host)) throw new Error(`ssh: connect to ${host}: refused`);
      return { default: memoryWorker(child.pid) };
    },
  });
  const on = (host: string) =>
    rt.live().filter((child: MemoryChild) => child.request.argv[0] === host);
  return { rt, down, on };
}

function spread(
  p: { stats(): { perWorker: { launcher: number; retiring: boolean }[] } },
): number[] {
  const load = [0, 0, 0];
  for (const worker of p.stats().perWorker) {
    if (!worker.retiring) {
      load[worker.launcher] = (load[worker.launcher] ?? 0) + 1;
    }
  }
  return load;
}

describe("pool() launchers (in memory)", () => {
  test("pool() with launchers loses a host, carries the load on the others, and moves workers back once it returns", async () => {
    const { rt, down, on } = hostsRuntime();
    using _rt = rt;
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      launchers: HOSTS,
      max: 6,
    });
    const first = Array.from({ length: 6 }, () => p.delay(200, "x"));
    await within(Promise.all(first), 10_000, "six calls");
    assert.deepEqual(spread(p), [2, 2, 2], "least loaded: two per host");

    // Host b goes down: its workers die with their calls, and its starts fail.
    down.add("host-b");
    const running = Array.from(
      { length: 6 },
      () => p.delay(300, "y").then(() => true, (error: unknown) => error),
    );
    await until(() => p.stats().busy === 6, 10_000, "six calls running");
    for (const child of on("host-b")) child.crash("SIGKILL");
    const outcomes = await within(Promise.all(running), 10_000, "the calls");
    const crashed = outcomes.filter((o) => o !== true);
    assert.equal(crashed.length, 2, "the two calls on host b failed");
    for (const error of crashed) {
      assert.ok(error instanceof WorkerCrashedError, String(error));
      assert.equal(error.executed, "maybe");
    }
    const more = Array.from({ length: 12 }, () => p.delay(100, "z"));
    await within(Promise.all(more), 10_000, "calls while host b is out");
    await until(
      () => spread(p)[0]! + spread(p)[2]! === 6,
      10_000,
      "host b's workers replaced on a and c",
    );
    assert.equal(spread(p)[1], 0);

    // Back: with no call arriving, the pool looks again when the backoff
    // ends and moves one worker at a time, until the shares are even.
    down.delete("host-b");
    await until(
      () => spread(p)[1] === 2,
      15_000,
      `host b to get two workers back (spread ${spread(p)})`,
    );
    assert.deepEqual(spread(p), [2, 2, 2]);
    assert.equal(await p.add(1, 2), 3);
  });
});
