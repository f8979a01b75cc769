// Call timing metrics in stats() (issue 18 item 3): wait and run time
// summaries (count, p50, p90, p99, max), utilization, and
// stats({ reset: true }) for periodic export.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { pool, session } from "../../mod.ts";
import type { TimingSummary } from "../../diagnostics.ts";
import { CallMetrics, Histogram } from "../../src/parent/_metrics.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";

checkNoLeaks();

const worker = fixture("behaviour_worker.ts");

/** Asserts the summary's percentiles are ordered and within its max. */
function assertOrdered(summary: TimingSummary): void {
  assert.ok(summary.p50 <= summary.p90, `p50 <= p90: ${summary.p50}`);
  assert.ok(summary.p90 <= summary.p99, `p90 <= p99: ${summary.p90}`);
  assert.ok(summary.p99 <= summary.max, `p99 <= max: ${summary.p99}`);
}

test("Histogram summarises 1..1000 ms within 4 % and keeps the exact max", () => {
  const histogram = new Histogram();
  for (let ms = 1; ms <= 1000; ms++) histogram.record(ms);
  const summary = histogram.summary();
  assert.equal(summary.count, 1000);
  assert.equal(summary.max, 1000);
  for (
    const [value, truth] of [[summary.p50, 500], [summary.p90, 900], [
      summary.p99,
      990,
    ]] as const
  ) {
    assert.ok(
      value >= truth && value <= truth * 1.04,
      `${value} within 4 % above ${truth}`,
    );
  }
  histogram.reset();
  assert.deepEqual(histogram.summary(), {
    count: 0,
    p50: 0,
    p90: 0,
    p99: 0,
    max: 0,
  });
});

test("Histogram takes zero, sub-microsecond, NaN and hour-long durations", () => {
  const histogram = new Histogram();
  for (const ms of [0, 0.0001, Number.NaN, -1, 5 * 3_600_000]) {
    histogram.record(ms);
  }
  const summary = histogram.summary();
  assert.equal(summary.count, 5);
  // The lowest bucket holds everything up to a microsecond.
  assert.ok(summary.p50 <= 0.001, `p50 ${summary.p50}`);
  assert.equal(summary.max, 5 * 3_600_000);
  assertOrdered(summary);
});

test("CallMetrics utilization counts running calls up to capacity", () => {
  const metrics = new CallMetrics();
  metrics.capacity = 2;
  const calls = [0, 1, 2].map(() => ({ admittedAt: 0, sentAt: 0 }));
  for (const call of calls) {
    metrics.admitted(call);
    metrics.sending(call);
    call.sentAt = performance.now();
  }
  // Three running on a capacity of two for 30 ms of a window barely
  // longer: full use, never more.
  const until = performance.now() + 30;
  while (performance.now() < until) {
    // Let the window pass on the metrics' own clock.
  }
  const busy = metrics.stats(true);
  assert.equal(busy.waitMs.count, 3);
  assert.ok(busy.utilization > 0.9, `utilization ${busy.utilization}`);
  assert.ok(busy.utilization <= 1);
  for (const call of calls) metrics.settled(call);
  const after = metrics.stats(false);
  assert.equal(after.runMs.count, 3);
  assert.equal(after.waitMs.count, 0);
});

describe("stats() timing figures", needsWorkers(), () => {
  test("session() stats() summarises wait and run time; reset starts afresh", async () => {
    await using s = await session<typeof behaviour>(worker);
    for (let i = 0; i < 3; i++) assert.equal(await s.delay(40, i), i);
    const stats = s.stats({ reset: true });
    assert.equal(stats.runMs.count, 3);
    assert.equal(stats.waitMs.count, 3);
    // The parent measures at least the handler's own 40 ms.
    assert.ok(stats.runMs.p50 >= 38, `run p50 ${stats.runMs.p50}`);
    assertOrdered(stats.runMs);
    assertOrdered(stats.waitMs);
    assert.ok(stats.waitMs.max < stats.runMs.max);
    assert.ok(stats.utilization > 0 && stats.utilization <= 1);
    assert.ok(stats.measuredMs >= stats.runMs.max);

    const fresh = s.stats();
    assert.equal(fresh.runMs.count, 0);
    assert.equal(fresh.waitMs.count, 0);
    assert.equal(fresh.utilization, 0);
    // Counters are never reset.
    assert.equal(fresh.calls, 3);
    assert.equal(fresh.completed, 3);

    // One call taking most of the window: the session was busy for most of it.
    await s.delay(300, null);
    const busy = s.stats({ reset: true });
    assert.equal(busy.runMs.count, 1);
    assert.ok(busy.utilization > 0.3, `utilization ${busy.utilization}`);
  });

  test("pool() stats() counts time queued for a worker as wait time", async () => {
    await using p = pool<typeof behaviour>(worker, { max: 1, prewarm: 1 });
    await p.echo(0);
    p.stats({ reset: true });
    // One worker, two calls: the second waits for the first.
    await Promise.all([p.delay(150, 1), p.delay(150, 2)]);
    const stats = p.stats();
    assert.equal(stats.runMs.count, 2);
    assert.equal(stats.waitMs.count, 2);
    assert.ok(stats.waitMs.max >= 140, `wait max ${stats.waitMs.max}`);
    assert.ok(stats.runMs.p50 >= 140, `run p50 ${stats.runMs.p50}`);
    assertOrdered(stats.waitMs);
    assert.ok(stats.utilization > 0.3 && stats.utilization <= 1);
    assert.deepEqual(
      stats.perWorker.map((w) => w.sandboxes),
      stats.perWorker.map(() => stats.perWorker[0]!.sandboxes),
    );
  });

  test("a call cancelled while queued counts neither wait nor run time", async () => {
    await using p = pool<typeof behaviour>(worker, { max: 1, prewarm: 1 });
    await p.echo(0);
    p.stats({ reset: true });
    const running = p.delay(100, 1);
    const controller = new AbortController();
    const queued = p.call("delay", [100, 2], { signal: controller.signal });
    controller.abort(new Error("not needed"));
    await assert.rejects(queued, /not needed/);
    await running;
    const stats = p.stats();
    assert.equal(stats.waitMs.count, 1);
    assert.equal(stats.runMs.count, 1);
  });
});
