// The write-ahead window (src/parent/_write_ahead.ts): which written calls
// wait in the worker's queue, which start as slots free up, and which of the
// calls lost with a worker it can never have started (retry safety).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  type WindowCall,
  WriteAheadWindow,
} from "../../src/parent/_write_ahead.ts";

function calls(count: number): WindowCall[] {
  return Array.from(
    { length: count },
    (_, i) => ({ id: i + 1, writtenSeq: -1 }),
  );
}

/** Writes `list` in order, as a connection does; returns which went ahead. */
function writeAll(
  window: WriteAheadWindow<WindowCall>,
  list: WindowCall[],
): boolean[] {
  return list.map((call, index) => window.written(call, index + 1));
}

describe("WriteAheadWindow", () => {
  test("a worker of unknown order: nothing is written ahead, no lost call is known unstarted", () => {
    const window = new WriteAheadWindow<WindowCall>();
    const list = calls(3);
    assert.deepEqual(writeAll(window, list), [false, false, false]);
    assert.deepEqual(list.map((c) => c.writtenSeq), [0, 1, 2]);
    assert.equal(window.unstarted(list, true).size, 0);
  });

  test("an ordered worker not limited writes nothing ahead, but knows which lost calls never started", () => {
    const window = new WriteAheadWindow<WindowCall>();
    window.ordered(2);
    const list = calls(4);
    assert.deepEqual(writeAll(window, list), [false, false, false, false]);
    assert.deepEqual([...window.unstarted(list, true)].map((c) => c.id), [
      3,
      4,
    ]);
  });

  test("under limit 1 the calls beyond the first wait, and start one per freed slot, in order", () => {
    const window = new WriteAheadWindow<WindowCall>();
    window.limit(1);
    const [a, b, c] = calls(3) as [WindowCall, WindowCall, WindowCall];
    assert.deepEqual(writeAll(window, [a, b, c]), [false, true, true]);
    assert.equal(window.waiting, 2);
    const started: number[] = [];
    const inFlight = new Set([b, c]); // a was answered
    window.promote(
      inFlight.size,
      (call) => inFlight.has(call),
      (call) => started.push(call.id),
    );
    assert.deepEqual(started, [2]);
    assert.equal(window.waiting, 1);
    // Nothing freed: c still waits.
    window.promote(
      inFlight.size,
      (call) => inFlight.has(call),
      (call) => started.push(call.id),
    );
    assert.deepEqual(started, [2]);
  });

  test("lost calls: all but the first `slots` unanswered never started; none when an answer may be unread", () => {
    const window = new WriteAheadWindow<WindowCall>();
    window.limit(1);
    const list = calls(3);
    writeAll(window, list);
    const lost = list.slice(1); // the first was answered
    assert.deepEqual([...window.unstarted(lost, true)].map((c) => c.id), [3]);
    const again = new WriteAheadWindow<WindowCall>();
    again.limit(1);
    writeAll(again, list);
    assert.equal(again.unstarted(lost, false).size, 0);
  });

  test("an abandoned call holds its slot until answered: the call after it counts as perhaps started", () => {
    const window = new WriteAheadWindow<WindowCall>();
    window.limit(1);
    const [a, b, c] = calls(3) as [WindowCall, WindowCall, WindowCall];
    writeAll(window, [a, b, c]);
    // a times out (it was running): it may run on, holding the slot.
    assert.equal(window.abandoned(a), false);
    const inFlight = new Set([b, c]);
    const started: number[] = [];
    window.promote(
      inFlight.size,
      (call) => inFlight.has(call),
      (call) => started.push(call.id),
    );
    assert.deepEqual(
      started,
      [2],
      "the parent starts b's deadline early, never late",
    );
    // The worker dies: a (abandoned) may hold the one slot, so b may not
    // have started, and c cannot have.
    assert.deepEqual(
      [...window.unstarted([b, c], true)].map((call) => call.id),
      [2, 3],
    );
  });

  test("an abandoned call answered frees its slot; one abandoned while waiting leaves the queue", () => {
    const window = new WriteAheadWindow<WindowCall>();
    window.limit(1);
    const [a, b, c] = calls(3) as [WindowCall, WindowCall, WindowCall];
    writeAll(window, [a, b, c]);
    assert.equal(window.abandoned(b), true, "b was still waiting");
    assert.equal(window.waiting, 1);
    window.answered(b.id);
    // a is lost running, c never started.
    assert.deepEqual(
      [...window.unstarted([a, c], true)].map((call) => call.id),
      [3],
    );
    assert.equal(window.waiting, 0, "cleared once the worker is gone");
  });
});
