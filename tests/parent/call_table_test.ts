// The calls of one connection (src/parent/_call_table.ts) without a
// process: a fake host records what the table writes, kills and tells.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ProtocolError, WorkerTimeoutError } from "../../src/errors.ts";
import type { Message } from "../../src/protocol/messages.ts";
import { createCall, type PendingCall } from "../../src/parent/_call.ts";
import { CallTable } from "../../src/parent/_call_table.ts";
import { Occupancy } from "../../src/parent/_occupancy.ts";
import { within } from "../_helpers/wait.ts";

/** A host that records what the table asks of its connection. */
function fakeHost(version = 4) {
  const host = {
    module: "fake.ts",
    cancelGraceMs: 60_000,
    writes: [] as Message[],
    kills: [] as string[],
    changes: 0,
    timeouts: [] as number[],
    started: [] as number[],
    liveness: [] as boolean[],
    events: {
      onTimeout: (call: { id: number }) => host.timeouts.push(call.id),
      onStarted: (call: { id: number }) => host.started.push(call.id),
      onLiveness: (alive: boolean) => host.liveness.push(alive),
    },
    pid: () => 42,
    hints: () => undefined,
    version: () => version,
    alive: () => host.kills.length === 0,
    write: (message: Message) => host.writes.push(message),
    kill: (reason: string) => host.kills.push(reason),
    changed: () => host.changes++,
  };
  return host;
}

function call(op = "op", timeoutMs = 0): PendingCall {
  const record = createCall(op, [], { timeoutMs, idempotent: false });
  record.promise.catch(() => {});
  return record;
}

/** Settles after `ms` with the timer ref'd (the table's timers are not). */
function holdOpen(ms: number): () => void {
  const timer = setTimeout(() => {}, ms);
  return () => clearTimeout(timer);
}

describe("CallTable", () => {
  test("CallTable answers a call: it settles, leaves the table, and the host is told", async () => {
    const host = fakeHost();
    const table = new CallTable(host);
    const a = call();
    assert.equal(table.add(a), true);
    assert.equal(a.attempts, 1);
    assert.equal(a.mayHaveRun, true);
    assert.equal(table.size, 1);
    table.answer({ type: "result", id: a.id, value: 7 });
    assert.equal(await a.promise, 7);
    assert.equal(table.size, 0);
    assert.ok(host.changes >= 1);
    // A second answer for it is late and dropped.
    table.answer({ type: "result", id: a.id, value: 8 });
  });

  test("CallTable starts a call written ahead once an answer frees its slot", () => {
    const host = fakeHost();
    const table = new CallTable(host);
    table.window.ordered(1);
    table.window.limit(1);
    const a = call();
    const b = call();
    assert.equal(table.add(a), true);
    assert.equal(table.add(b), false);
    assert.equal(b.mayHaveRun, false);
    table.answer({ type: "result", id: a.id, value: 1 });
    assert.deepEqual(host.started, [b.id]);
    assert.equal(b.mayHaveRun, true);
  });

  test("CallTable times a call out, asks for liveness once, and kills on a second timeout", async () => {
    const host = fakeHost(4);
    const table = new CallTable(host);
    const release = holdOpen(10_000);
    try {
      const a = call("slow", 20);
      table.add(a);
      const error = await within(
        a.promise.then(() => undefined, (e: unknown) => e),
        5_000,
        "the first timeout",
      );
      assert.ok(error instanceof WorkerTimeoutError);
      assert.deepEqual(host.timeouts, [a.id]);
      assert.deepEqual(host.kills, []);
      assert.ok(host.writes.some((m) => m.type === "ping"));
      assert.ok(host.writes.some((m) => m.type === "cancel" && m.id === a.id));
      assert.equal(table.checking, true);
      table.pong();
      assert.equal(table.checking, false);
      assert.deepEqual(host.liveness, [true]);
      const b = call("slower", 20);
      table.add(b);
      await within(
        b.promise.then(() => undefined, () => undefined),
        5_000,
        "the second timeout",
      );
      assert.equal(host.kills.length, 1);
      assert.match(host.kills[0]!, /timed out twice in a row/);
    } finally {
      table.clear(true, undefined);
      release();
    }
  });

  test("CallTable cancels a call: it rejects at once, the worker is told, its late answer releases it", async () => {
    const host = fakeHost();
    const table = new CallTable(host);
    const a = call();
    table.add(a);
    const reason = new Error("no longer wanted");
    assert.equal(table.cancel(a, reason), true);
    assert.equal(table.cancel(a, reason), false);
    await assert.rejects(a.promise, (e: unknown) => e === reason);
    assert.equal(table.running, 1);
    assert.deepEqual(host.writes.at(-1), { type: "cancel", id: a.id });
    table.dropped(a.id);
    assert.equal(table.running, 0);
  });

  test("CallTable refuses a dropped for a call in flight and items for a plain call", () => {
    const table = new CallTable(fakeHost());
    const a = call();
    table.add(a);
    assert.throws(() => table.dropped(a.id), ProtocolError);
    const plain = call();
    plain.plain = true;
    table.add(plain);
    assert.throws(
      () => table.items({ type: "items", id: plain.id, values: [1] }, 10),
      ProtocolError,
    );
  });

  test("CallTable.clear() gives the lost calls in order and those never started", () => {
    const host = fakeHost();
    const table = new CallTable(host);
    table.window.ordered(1);
    table.window.limit(1);
    const a = call();
    const b = call();
    const c = call();
    for (const record of [a, b, c]) table.add(record);
    const { lost, unstarted } = table.clear(true, undefined);
    assert.deepEqual(lost, [a, b, c]);
    assert.deepEqual([...unstarted], [b, c]);
    assert.equal(a.mayHaveRun, true);
    assert.equal(b.mayHaveRun, false);
    assert.equal(table.size, 0);
    // An incomplete read of the answers: any of them may have started.
    const other = new CallTable(fakeHost());
    other.window.ordered(1);
    other.window.limit(1);
    const d = call();
    const e = call();
    other.add(d);
    other.add(e);
    assert.equal(other.clear(false, undefined).unstarted.size, 0);
    assert.equal(e.mayHaveRun, true);
  });
});

describe("Occupancy", () => {
  test("Occupancy tells a freed slot once per turn and settles idle waiters", async () => {
    let freed = 0;
    const occupancy = new Occupancy({ onSlotFree: () => freed++ });
    occupancy.update(3, 0);
    const idle = occupancy.idle(3);
    occupancy.update(2, 0);
    occupancy.update(1, 0);
    assert.equal(freed, 0);
    await Promise.resolve();
    assert.equal(freed, 1);
    let settled = false;
    idle.then(() => settled = true);
    occupancy.update(0, 1);
    await idle;
    assert.equal(settled, true);
    await occupancy.idle(0);
  });
});
