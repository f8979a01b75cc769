// The pool's placement and pacing policy (src/parent/_pool_policy.ts): pure
// functions over plain data, as tables.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  aheadOpen,
  cappedMax,
  DESCRIPTOR_PAUSE_MS,
  descriptorCap,
  hasRoom,
  leastBusy,
  LONG_CALL_MS,
  nextWindow,
  type PlacementView,
  REBALANCE_GAP,
  rebalanceSource,
  replacementDue,
  type ReplacementFacts,
  type WindowFacts,
  workersToStart,
} from "../../src/parent/_pool_policy.ts";

const NOW = 10_000;

type Named = PlacementView & { name: string };

/** A worker that takes calls, idle, answered just now. */
function worker(
  fields: Partial<Omit<PlacementView, "conn" | "keys">> & {
    occupancy?: number;
    streaming?: boolean;
    alive?: boolean;
    checking?: boolean;
    keys?: number;
    name?: string;
  } = {},
): Named {
  return {
    name: fields.name ?? "w",
    retiring: fields.retiring ?? false,
    standby: fields.standby ?? false,
    window: fields.window ?? 0,
    markAt: fields.markAt ?? NOW,
    keys: { size: fields.keys ?? 0 },
    conn: {
      alive: fields.alive ?? true,
      checking: fields.checking ?? false,
      occupancy: fields.occupancy ?? 0,
      streaming: fields.streaming ?? false,
    },
  };
}

describe("pool placement", () => {
  test("hasRoom() takes a free slot, and writes ahead only within the window, behind short calls", () => {
    // [worker, concurrency, ahead, expected, why]
    const rows: [PlacementView, number, boolean, boolean, string][] = [
      [worker(), 1, false, true, "idle"],
      [worker({ occupancy: 1 }), 2, false, true, "a slot free"],
      [worker({ occupancy: 1 }), 1, false, false, "full, no writing ahead"],
      [worker({ occupancy: 1 }), 1, true, false, "full, window 0"],
      [worker({ occupancy: 1, window: 1 }), 1, true, true, "window 1"],
      [worker({ occupancy: 2, window: 1 }), 1, true, false, "window used"],
      [worker({ occupancy: 2, window: 4 }), 1, true, true, "window 4"],
      [
        worker({ occupancy: 1, window: 4, markAt: NOW - LONG_CALL_MS }),
        1,
        true,
        true,
        "no answer for exactly a long call",
      ],
      [
        worker({ occupancy: 1, window: 4, markAt: NOW - LONG_CALL_MS - 1 }),
        1,
        true,
        false,
        "behind a long call",
      ],
      [
        worker({ occupancy: 1, window: 4, streaming: true }),
        1,
        true,
        false,
        "behind a stream",
      ],
      [worker({ retiring: true }), 1, true, false, "retiring"],
      [worker({ standby: true }), 1, true, false, "on standby"],
      [worker({ alive: false }), 1, true, false, "dead"],
      [worker({ checking: true }), 1, true, false, "liveness check"],
    ];
    for (const [view, concurrency, ahead, expected, why] of rows) {
      assert.equal(hasRoom(view, concurrency, ahead, NOW), expected, why);
    }
  });

  test("leastBusy() takes the fewest calls, then the fewest keys, then the first", () => {
    const rows: [Named[], string | undefined][] = [
      [[], undefined],
      [[worker({ name: "a", occupancy: 1 })], undefined],
      [[worker({ name: "a" }), worker({ name: "b" })], "a"],
      [[worker({ name: "a", occupancy: 1 }), worker({ name: "b" })], "b"],
      [[worker({ name: "a", keys: 2 }), worker({ name: "b", keys: 1 })], "b"],
      [
        [worker({ name: "a", retiring: true }), worker({ name: "b", keys: 5 })],
        "b",
      ],
      [
        [
          worker({ name: "a", occupancy: 2, window: 2 }),
          worker({ name: "b", occupancy: 1, window: 2 }),
        ],
        "b",
      ],
    ];
    for (const [workers, expected] of rows) {
      assert.equal(
        leastBusy(workers, 1, true, NOW)?.name,
        expected,
        workers.map((w) => w.name).join(","),
      );
    }
  });

  test("aheadOpen() opens at max with no start but replacements on", () => {
    // [starting, successorStarts, live, max, expected]
    const rows: [number, number, number, number, boolean][] = [
      [0, 0, 4, 4, true],
      [0, 0, 3, 4, false],
      [1, 0, 3, 4, false],
      [1, 1, 3, 4, true],
      [2, 1, 3, 4, false],
      [0, 0, 5, 4, true],
    ];
    for (const [starting, successors, live, max, expected] of rows) {
      assert.equal(
        aheadOpen(starting, successors, live, max),
        expected,
        `${starting} ${successors} ${live} ${max}`,
      );
    }
  });

  test("workersToStart() starts one per concurrency's worth of calls, within max", () => {
    // [placeable, concurrency, starting, live, max, expected]
    const rows: [number, number, number, number, number, number][] = [
      [0, 1, 0, 0, 4, 0],
      [1, 1, 0, 0, 4, 1],
      [3, 1, 0, 0, 4, 3],
      [9, 1, 0, 0, 4, 4],
      [9, 1, 0, 3, 4, 1],
      [9, 1, 1, 2, 4, 1],
      [3, 2, 0, 0, 4, 2],
      [3, 1, 2, 0, 4, 1],
      [1, 1, 0, 4, 4, 0],
    ];
    for (
      const [placeable, concurrency, starting, live, max, expected] of rows
    ) {
      assert.equal(
        Math.max(
          0,
          workersToStart(placeable, concurrency, starting, live, max),
        ),
        expected,
        `${placeable} ${concurrency} ${starting} ${live} ${max}`,
      );
    }
  });
});

describe("pool write-ahead window", () => {
  test("nextWindow() doubles from 1 when the worker would idle, closes behind long calls", () => {
    const base: WindowFacts = {
      window: 1,
      room: 8,
      perCallMs: 1,
      occupancy: 1,
      concurrency: 1,
      queued: 3,
    };
    const rows: [Partial<WindowFacts>, number, string][] = [
      [{}, 2, "doubles"],
      [{ window: 0 }, 1, "reopens at 1"],
      [{ window: 4 }, 8, "up to the room"],
      [{ window: 8 }, 8, "stays at the room"],
      [{ window: 4, queued: 0 }, 4, "nothing queued: stays"],
      [{ window: 4, occupancy: 2 }, 4, "calls queued behind: stays"],
      [{ perCallMs: LONG_CALL_MS }, 2, "exactly a long call still grows"],
      [{ perCallMs: LONG_CALL_MS + 0.1 }, 0, "slower: closes"],
    ];
    for (const [change, expected, why] of rows) {
      assert.equal(nextWindow({ ...base, ...change }), expected, why);
    }
  });
});

describe("pool pacing", () => {
  test("replacementDue() leads by 1.5 starts at the worker's pace, at least the last tenth", () => {
    const base: ReplacementFacts = {
      limit: 100,
      calls: 1,
      firstCallAt: 0,
      now: 0,
      startMs: 100,
    };
    const rows: [Partial<ReplacementFacts>, boolean, string][] = [
      [{ calls: 1 }, false, "first call: no pace yet"],
      [{ calls: 89, now: 880_000 }, false, "before the last tenth, slow calls"],
      [{ calls: 90, now: 890_000 }, true, "the last tenth, slow calls"],
      // 10 ms per call: 1.5 × 100 ms is 15 calls ahead.
      [{ calls: 84, now: 830 }, false, "16 left at 10 ms a call"],
      [{ calls: 85, now: 840 }, true, "15 left at 10 ms a call"],
      // Calls faster than the clock: start now.
      [{ calls: 2, now: 0 }, true, "no time per call measured"],
      [{ calls: 100, now: 990 }, false, "none left: it recycles instead"],
      [{ limit: 1, calls: 1 }, false, "a limit of one"],
    ];
    for (const [change, expected, why] of rows) {
      assert.equal(replacementDue({ ...base, ...change }), expected, why);
    }
  });

  test("rebalanceSource() moves from the most loaded when the gap is REBALANCE_GAP", () => {
    assert.equal(REBALANCE_GAP, 2);
    const rows: [number[], number, number | undefined][] = [
      [[2, 0], 1, 0],
      [[1, 0], 1, undefined],
      [[3, 3, 1], 2, 0],
      [[1, 3, 1], 0, 1],
      [[0, 0, 0], 0, undefined],
      [[5], 0, undefined],
    ];
    for (const [load, low, expected] of rows) {
      assert.equal(rebalanceSource(load, low), expected, `${load} ${low}`);
    }
  });

  test("a descriptor cap holds the workers that fit for DESCRIPTOR_PAUSE_MS", () => {
    const cap = descriptorCap(3, NOW);
    assert.deepEqual(cap, { workers: 3, until: NOW + DESCRIPTOR_PAUSE_MS });
    assert.equal(cappedMax(8, cap, NOW), 3);
    assert.equal(cappedMax(2, cap, NOW), 2);
    assert.equal(cappedMax(8, cap, NOW + DESCRIPTOR_PAUSE_MS - 1), 3);
    assert.equal(cappedMax(8, cap, NOW + DESCRIPTOR_PAUSE_MS), 8);
    assert.equal(cappedMax(8, { workers: Infinity, until: 0 }, NOW), 8);
  });
});
