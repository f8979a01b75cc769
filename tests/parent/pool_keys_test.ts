// pool() sticky routing: calls with the same `key` (or the same `route(op,
// args)`) run on the same live worker; a busy key's calls wait for their
// worker while other calls pass; a recycled or crashed worker's keys move.
// On the in-memory runtime (tests/_memory_adapter.ts), plus one case with
// real processes.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { pool, WorkerCrashedError } from "../../mod.ts";
import type memory from "../fixtures/memory_worker.ts";
import { memoryWorker } from "../fixtures/memory_worker.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import { memoryRuntime } from "../_memory_adapter.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

checkNoLeaks();

const MODULE = fixture("memory_worker.ts");
const quiet = captureLog();

function runtime() {
  return memoryRuntime({
    load: (child) => ({ default: memoryWorker(child.pid) }),
  });
}

describe("pool() sticky keys (in memory)", () => {
  test("pool() runs every call with the same key on the same worker, and stats() shows the spread", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 3,
      prewarm: 3,
    });
    await until(() => p.stats().workers === 3, 10_000, "three workers");
    const keys = ["a", "b", "c", 7];
    const calls = [];
    for (let round = 0; round < 5; round++) {
      for (const key of keys) {
        calls.push(
          p.call("whoami", [], { key }).then((pid) => ({ key, pid })),
        );
      }
    }
    const results = await within(Promise.all(calls), 10_000, "20 calls");
    for (const key of keys) {
      const pids = new Set(
        results.filter((r) => r.key === key).map((r) => r.pid),
      );
      assert.equal(pids.size, 1, `key ${key} ran on one worker: ${[...pids]}`);
    }
    const stats = p.stats();
    assert.equal(stats.keys, 4);
    assert.equal(
      stats.perWorker.reduce((sum, worker) => sum + worker.keys, 0),
      4,
    );
    assert.deepEqual(
      stats.perWorker.map((worker) => worker.keys).sort(),
      [1, 1, 2],
      "new keys go to the worker with the fewest",
    );
  });

  test("pool() keeps a busy key's calls for its worker while other calls pass", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 2,
      prewarm: 2,
    });
    const owner = await p.call("whoami", [], { key: "tenant" });
    const controller = new AbortController();
    const long = p.call("delay", [60_000, "long"], {
      key: "tenant",
      signal: controller.signal,
    }).catch((error: unknown) => error);
    let waitedAt: number | undefined;
    const waiting = p.call("whoami", [], { key: "tenant" }).then((pid) => {
      waitedAt = Date.now();
      return pid;
    });
    // Calls without the key (and with another key) run on the other worker.
    const free = await within(p.whoami(), 10_000, "an unkeyed call");
    const other = await within(
      p.call("whoami", [], { key: "other" }),
      10_000,
      "another key",
    );
    assert.notEqual(free, owner);
    assert.notEqual(other, owner);
    assert.equal(waitedAt, undefined, "the keyed call still waits");
    controller.abort(new Error("done"));
    assert.equal(await within(waiting, 10_000, "the keyed call"), owner);
    assert.equal(((await long) as Error).message, "done");
  });

  test("pool() moves a key to another worker when its worker is recycled", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 1,
      maxTasksPerWorker: 2,
    });
    const first = await p.call("whoami", [], { key: "k" });
    assert.equal(await p.call("whoami", [], { key: "k" }), first);
    const moved = await within(
      p.call("whoami", [], { key: "k" }),
      10_000,
      "the call after recycling",
    );
    assert.notEqual(moved, first);
    assert.equal(p.stats().keys, 1);
    assert.equal(await p.call("whoami", [], { key: "k" }), moved);
  });

  test("pool() moves a key to another worker when its worker crashes", async () => {
    using rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 2,
      prewarm: 2,
    });
    const first = await p.call("whoami", [], { key: "k" });
    const pending = p.call("hang", [], { key: "k" });
    rt.live().find((child) => child.pid === first)?.crash("SIGKILL");
    await rejection(pending, WorkerCrashedError);
    const moved = await within(
      p.call("whoami", [], { key: "k" }),
      10_000,
      "the call after the crash",
    );
    assert.notEqual(moved, first);
  });

  test("pool() route(op, args) keys calls made through the typed proxy", async () => {
    using _rt = runtime();
    const routed: string[] = [];
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      max: 3,
      route: (op, args) => {
        routed.push(op);
        return op === "echo" ? String(args[0]) : undefined;
      },
    });
    const results = await within(
      Promise.all(
        [1, 2, 1, 2, 1, 2].map((n) =>
          p.echo(n).then(() => p.call("whoami", [], { key: String(n) }))
        ),
      ),
      10_000,
      "routed calls",
    );
    assert.equal(results[0], results[2]);
    assert.equal(results[2], results[4]);
    assert.equal(results[1], results[3]);
    assert.ok(routed.includes("echo"));
    assert.equal(p.stats().keys, 2);
    // An explicit key wins over route: no new key is bound.
    await p.call("echo", [3], { key: "1" });
    assert.equal(p.stats().keys, 2);
  });

  test("pool() refuses a key that is neither a string nor a number", async () => {
    using _rt = runtime();
    await using p = pool<typeof memory>(MODULE, {
      ...quiet,
      route: () => ({}) as unknown as string,
    });
    await rejection(
      p.call("whoami", [], { key: {} as unknown as string }),
      TypeError,
    );
    await rejection(
      p.call("whoami", [], { key: Number.NaN }),
      TypeError,
    );
    const error = await rejection(p.whoami(), TypeError);
    assert.match(error.message, /route\(op, args\)/);
    assert.throws(
      () => pool(MODULE, { route: "x" as unknown as () => string }),
      TypeError,
    );
  });
});

describe("pool() sticky keys (processes)", needsWorkers(), () => {
  test("pool() sends calls with the same key to the same worker process", async () => {
    await using p = pool<typeof behaviour>(fixture("behaviour_worker.ts"), {
      ...captureLog(),
      max: 2,
      prewarm: 2,
    });
    const ids = await Promise.all(
      Array.from(
        { length: 8 },
        (_, i) => p.call("whoami", [], { key: i % 2 === 0 ? "even" : "odd" }),
      ),
    );
    const even = new Set(ids.filter((_, i) => i % 2 === 0));
    const odd = new Set(ids.filter((_, i) => i % 2 === 1));
    assert.equal(even.size, 1);
    assert.equal(odd.size, 1);
    assert.equal(p.stats().keys, 2);
  });
});
