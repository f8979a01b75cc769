// pool({ launchers }) with local launchers (real processes, no sshd): a
// launcher that is a plain prefix ("env"), one whose starts always fail
// ("false"), placement and the error once every launcher is set aside. The
// same over three ssh hosts, one lost and back: pool_ssh_hosts_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { pool, WorkerStartError } from "../../mod.ts";
import {
  findPython,
  PYTHON_ENTRY,
  pythonFixture,
} from "../conformance/_python.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";
import { rejection, within } from "../_helpers/wait.ts";
import { scratchDir } from "../_helpers/files.ts";

checkNoLeaks();

const python = findPython();

interface LedgerWorker {
  write(ledger: string, id: number, ms: number): number;
  read(ledger: string, id: number, ms: number): number;
  whoami(): number;
}

const COMMAND = [
  python.path ?? "python3",
  "-B",
  PYTHON_ENTRY,
  pythonFixture("ledger_worker.py"),
];
const LOCAL = ["env"];
const FAILING = ["false"];

describe("pool: launchers", needs("python3"), () => {
  test("pool() with launchers spreads workers over them, the least loaded first", async () => {
    using dir = scratchDir("launchers");
    await using p = pool<LedgerWorker>(PYTHON_ENTRY, {
      launchers: [LOCAL, LOCAL, LOCAL],
      command: COMMAND,
      max: 3,
      onStderr: () => {},
    });
    const ledger = dir.join("ledger");
    const ids = [1, 2, 3];
    assert.deepEqual(
      await within(
        Promise.all(ids.map((id) => p.read(ledger, id, 300))),
        30_000,
        "three calls",
      ),
      ids,
    );
    const launchers = p.stats().perWorker.map((worker) => worker.launcher);
    assert.deepEqual(launchers.sort(), [0, 1, 2]);
  });

  test("pool() sets a launcher whose starts fail aside: the others carry the load", async () => {
    using dir = scratchDir("launchers");
    await using p = pool<LedgerWorker>(PYTHON_ENTRY, {
      launchers: [LOCAL, FAILING, LOCAL],
      command: COMMAND,
      max: 3,
      onStderr: () => {},
    });
    const ledger = dir.join("ledger");
    const ids = Array.from({ length: 12 }, (_, i) => i);
    const results = await within(
      Promise.all(ids.map((id) => p.write(ledger, id, 50))),
      30_000,
      "twelve calls",
    );
    assert.deepEqual(results, ids, "every call ran on a launcher that works");
    const stats = p.stats();
    assert.ok(stats.perWorker.length >= 1);
    for (const worker of stats.perWorker) {
      assert.notEqual(worker.launcher, 1, "no worker runs through `false`");
    }
  });

  test("pool() with every launcher set aside fails calls with WorkerStartError naming each launcher's last failure", async () => {
    await using p = pool<LedgerWorker>(PYTHON_ENTRY, {
      launchers: [FAILING, ["sh", "-c", "exit 7"]],
      command: COMMAND,
      onStderr: () => {},
    });
    const error = await rejection(
      within(p.whoami(), 30_000, "the call"),
      WorkerStartError,
    );
    assert.equal(error.executed, "no");
    assert.match(error.message, /every launcher is set aside/);
    assert.match(
      error.message,
      /launcher 0 \("false", set aside for \d+ s more\): Cannot start/,
    );
    assert.match(error.message, /launcher 1 \("sh -c exit 7", set aside/);
    assert.match(error.message, /code 7/);
    // Set aside: the next call fails at once, with no start.
    const again = await rejection(p.whoami(), WorkerStartError);
    assert.match(again.message, /every launcher is set aside/);
  });

  test("pool() refuses launchers that are empty, malformed, or given with launcher", () => {
    assert.throws(() => pool(PYTHON_ENTRY, { launchers: [] }), RangeError);
    assert.throws(() => pool(PYTHON_ENTRY, { launchers: [[]] }), RangeError);
    assert.throws(
      () => pool(PYTHON_ENTRY, { launchers: "ssh" as unknown as string[][] }),
      TypeError,
    );
    assert.throws(
      () =>
        pool(PYTHON_ENTRY, { launchers: [["ssh", 1 as unknown as string]] }),
      /launchers\[0\]\[1\]/,
    );
    assert.throws(
      () =>
        pool(PYTHON_ENTRY, {
          launcher: ["ssh", "a"],
          launchers: [["ssh", "b"]],
        }),
      /"launcher" and "launchers"/,
    );
    assert.throws(
      () => pool(PYTHON_ENTRY, { launchers: [LOCAL], maxRssBytes: 2 ** 30 }),
      /runs elsewhere/,
    );
  });
});
