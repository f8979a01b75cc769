// The launchers' placement and health policy (src/parent/_launcher_health.ts):
// pure functions over plain data, as tables.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BACKOFF_FIRST_MS,
  BACKOFF_MAX_MS,
  describeLaunchers,
  diedAtConnect,
  EARLY_EXIT_MS,
  freshHealth,
  inService,
  type LauncherHealth,
  pickLauncher,
  recordFailure,
  recordSuccess,
  START_FAILURES_TO_SET_ASIDE,
} from "../../src/parent/_launcher_health.ts";

const NOW = 1_000_000;

function aside(until: number): LauncherHealth {
  return { ...freshHealth(), failures: 2, asideUntil: until };
}

describe("launcher health", () => {
  test("pickLauncher() takes the least loaded launcher in service, ties to the lowest index", () => {
    const fresh = () => [freshHealth(), freshHealth(), freshHealth()];
    const rows: [LauncherHealth[], number[], number | undefined][] = [
      [fresh(), [0, 0, 0], 0],
      [fresh(), [1, 0, 0], 1],
      [fresh(), [1, 1, 0], 2],
      [fresh(), [2, 1, 1], 1],
      [[aside(NOW + 1), freshHealth(), freshHealth()], [0, 3, 2], 2],
      [[aside(NOW + 1), aside(NOW + 5), freshHealth()], [0, 0, 9], 2],
      [[aside(NOW + 1), aside(NOW + 5), aside(NOW + 9)], [0, 0, 0], undefined],
      // A backoff that has passed: in service again (tried once more).
      [[aside(NOW), aside(NOW + 5), freshHealth()], [0, 0, 1], 0],
      [[freshHealth()], [7], 0],
    ];
    for (const [health, load, expected] of rows) {
      assert.equal(
        pickLauncher(health, load, NOW),
        expected,
        `load ${load.join(",")}`,
      );
    }
  });

  test("recordFailure() sets a launcher aside after failures in a row, the backoff doubling to its cap", () => {
    const health = freshHealth();
    for (let i = 1; i < START_FAILURES_TO_SET_ASIDE; i++) {
      assert.equal(recordFailure(health, new Error(`no ${i}`), NOW), false);
      assert.equal(inService(health, NOW), true);
    }
    assert.equal(recordFailure(health, new Error("refused"), NOW), true);
    assert.equal(inService(health, NOW), false);
    assert.equal(health.asideUntil, NOW + BACKOFF_FIRST_MS);
    assert.equal(inService(health, NOW + BACKOFF_FIRST_MS), true);
    // Tried again and failed: aside at once, for twice as long.
    const later = NOW + BACKOFF_FIRST_MS;
    assert.equal(recordFailure(health, new Error("refused"), later), true);
    assert.equal(health.asideUntil, later + 2 * BACKOFF_FIRST_MS);
    for (let i = 0; i < 20; i++) recordFailure(health, "again", later);
    assert.equal(health.asideUntil, later + BACKOFF_MAX_MS);
    assert.equal(health.lastFailure, "again");
  });

  test("recordSuccess() puts a launcher back in service and starts its backoff over", () => {
    const health = freshHealth();
    for (let i = 0; i < 5; i++) recordFailure(health, "down", NOW);
    recordSuccess(health);
    assert.deepEqual(
      [health.failures, health.asideUntil, health.backoffMs],
      [0, 0, BACKOFF_FIRST_MS],
    );
    assert.equal(inService(health, NOW), true);
  });

  test("diedAtConnect() counts only exits not asked for, soon after the start", () => {
    const rows: [boolean, number, boolean][] = [
      [false, 0, true],
      [false, EARLY_EXIT_MS - 1, true],
      [false, EARLY_EXIT_MS, false],
      [true, 0, false],
    ];
    for (const [requested, after, expected] of rows) {
      assert.equal(diedAtConnect(requested, NOW, NOW + after), expected);
    }
  });

  test("describeLaunchers() names each launcher, its state and the first line of its last failure", () => {
    const down = freshHealth();
    recordFailure(down, new Error("Cannot start worker: refused\nstderr"), NOW);
    recordFailure(down, new Error("Cannot start worker: refused\nstderr"), NOW);
    const text = describeLaunchers(
      [["ssh", "a"], ["ssh", "b"]],
      [down, freshHealth()],
      NOW,
    );
    assert.equal(
      text,
      'launcher 0 ("ssh a", set aside for 1 s more): Cannot start worker: refused; ' +
        'launcher 1 ("ssh b", in service): no failure yet',
    );
    const long = freshHealth();
    recordFailure(long, "x".repeat(1_000), NOW);
    assert.ok(describeLaunchers([["a"]], [long], NOW).length < 400);
  });
});
