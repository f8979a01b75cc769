import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { oneShot, pool, session, WorkerStartError } from "../../mod.ts";
import { setStartCodeImporterForTest } from "../../src/parent/_launch.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { rejection } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("behaviour_worker.ts");

/** A damaged install: airlock's start code is not there. */
function damaged(): Error {
  return new TypeError(
    'Module not found "file:///app/src/parent/_start_worker.ts"',
  );
}

describe("a start whose start code cannot be loaded", needsWorkers(), () => {
  test("fails with WorkerStartError (spawn) naming the cause and the fix, in every mode, and a later start tries again", async () => {
    let imports = 0;
    setStartCodeImporterForTest(() => {
      imports++;
      return Promise.reject(damaged());
    });
    try {
      const check = (error: WorkerStartError) => {
        assert.equal(error.failure, "spawn");
        assert.match(error.message, /start code .* could not be loaded/);
        assert.match(error.message, /Module not found/);
        assert.match(error.message, /reinstall @airlock\/airlock/);
        assert.ok(error.cause instanceof TypeError);
        assert.equal(error.pid, undefined);
      };
      check(
        await rejection(
          session<typeof behaviour>(worker, { ...captureLog(), maxRetries: 0 }),
          WorkerStartError,
        ),
      );
      const p = pool<typeof behaviour>(worker, {
        ...captureLog(),
        max: 1,
        maxRetries: 0,
      });
      const one = oneShot<typeof behaviour>(worker, captureLog());
      try {
        check(await rejection(p.add(1, 2), WorkerStartError));
        check(await rejection(one.add(1, 2), WorkerStartError));
        // Not remembered: every start tried the import again.
        assert.ok(imports >= 3, `imports tried: ${imports}`);
      } finally {
        await Promise.allSettled([p.close(), one.close()]);
      }
    } finally {
      setStartCodeImporterForTest(undefined);
    }
    // The real start code again: a start works.
    await using s = await session<typeof behaviour>(worker, captureLog());
    assert.equal(await s.add(1, 2), 3);
  });
});
