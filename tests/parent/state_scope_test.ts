import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, renameSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { pool, session, stateScope } from "../../mod.ts";
import type sqlite from "../fixtures/sqlite_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("sqlite_worker.ts");

/** A data directory holding app.db with one table and one row. */
function makeData(dir: string, table: string, value: string): void {
  mkdirSync(dir, { recursive: true });
  const db = new DatabaseSync(join(dir, "app.db"));
  db.exec(`create table ${table}(v text)`);
  db.prepare(`insert into ${table} values (?)`).run(value);
  db.close();
}

function scratch(): { root: string; data: string; db: string } {
  const root = mkdtempSync(join(tmpdir(), "airlock-watch-"));
  const data = join(root, "data");
  return { root, data, db: join(data, "app.db") };
}

function options(root: string, db: string, watch: string) {
  return {
    ...captureLog(),
    permissions: { read: [root], write: [root] },
    setup: [["open", db]] as const,
    watch,
  };
}

describe("watch", needsWorkers(), () => {
  test("session() with watch sees a wiped and recreated directory on the very next call", async () => {
    const { root, data, db } = scratch();
    try {
      makeData(data, "t1", "old");
      await using s = await session<typeof sqlite>(
        worker,
        options(root, db, data),
      );
      assert.deepEqual(await s.all("select v from t1"), [{ v: "old" }]);
      const before = s.pid;
      rmSync(data, { recursive: true });
      makeData(data, "t2", "new");
      assert.deepEqual(await s.all("select v from t2"), [{ v: "new" }]);
      assert.notEqual(s.pid, before);
      assert.equal(s.stats().recycledBy.watch, 1);
      assert.deepEqual(await s.all("select v from t2"), [{ v: "new" }]);
      assert.equal(s.stats().recycledBy.watch, 1, "no recycle when unchanged");
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("pool() with watch recycles both workers after a wipe", async () => {
    const { root, data, db } = scratch();
    try {
      makeData(data, "t1", "old");
      await using p = pool<typeof sqlite>(worker, {
        ...options(root, db, data),
        max: 2,
        prewarm: 2,
      });
      await until(() => p.stats().workers === 2, 30_000, "two workers");
      const old = await Promise.all([
        p.slowAll("select v from t1", 100),
        p.slowAll("select v from t1", 100),
      ]);
      assert.equal(new Set(old.map((r) => r.pid)).size, 2);
      rmSync(data, { recursive: true });
      makeData(data, "t2", "new");
      const fresh = await Promise.all([
        p.slowAll("select v from t2", 100),
        p.slowAll("select v from t2", 100),
      ]);
      for (const result of fresh) {
        assert.deepEqual(result.rows, [{ v: "new" }]);
        assert.ok(!old.some((r) => r.pid === result.pid));
      }
      assert.equal(p.stats().recycledBy.watch, 2);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("session() with watch on a file sees a new database renamed over it", async () => {
    const { root, data, db } = scratch();
    try {
      makeData(data, "t1", "old");
      await using s = await session<typeof sqlite>(
        worker,
        options(root, db, db),
      );
      assert.deepEqual(await s.all("select v from t1"), [{ v: "old" }]);
      const staging = join(root, "staging");
      makeData(staging, "t2", "restored");
      renameSync(join(staging, "app.db"), db);
      assert.deepEqual(await s.all("select v from t2"), [{ v: "restored" }]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("session() calls in flight during a recycle complete on the old worker", async () => {
    const { root, data, db } = scratch();
    try {
      makeData(data, "t1", "old");
      await using s = await session<typeof sqlite>(
        worker,
        options(root, db, data),
      );
      const oldPid = s.pid;
      const inFlight = s.slowAll("select v from t1", 300);
      const oldId = await s.whoami();
      rmSync(data, { recursive: true });
      makeData(data, "t2", "new");
      const next = s.all("select v from t2");
      const finished = await inFlight;
      assert.equal(finished.pid, oldId);
      assert.deepEqual(finished.rows, [{ v: "old" }]);
      assert.deepEqual(await next, [{ v: "new" }]);
      assert.notEqual(s.pid, oldPid);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});

describe("invalidate and scopes", needsWorkers(), () => {
  test("session() invalidate() after an in-place schema change gives a new pid on the next call", async () => {
    const { root, data, db } = scratch();
    try {
      makeData(data, "t1", "old");
      await using s = await session<typeof sqlite>(worker, {
        ...options(root, db, data),
      });
      const before = await s.whoami();
      const direct = new DatabaseSync(db);
      direct.exec("alter table t1 add column w text");
      direct.close();
      s.invalidate();
      assert.notEqual(await s.whoami(), before);
      assert.equal(s.stats().recycledBy.invalidate, 1);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("stateScope() shared by a session and a pool recycles both", async () => {
    const { root, data, db } = scratch();
    try {
      makeData(data, "t1", "old");
      const scope = stateScope();
      const base = {
        ...captureLog(),
        permissions: { read: [root], write: [root] },
        setup: [["open", db]] as const,
        scope,
      };
      await using s = await session<typeof sqlite>(worker, base);
      await using p = pool<typeof sqlite>(worker, { ...base, max: 1 });
      const sessionPid = await s.whoami();
      const poolPid = await p.whoami();
      scope.invalidate();
      assert.notEqual(await s.whoami(), sessionPid);
      assert.notEqual(await p.whoami(), poolPid);
      assert.equal(s.stats().recycledBy.invalidate, 1);
      assert.equal(p.stats().recycledBy.invalidate, 1);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("stateScope() paths are watched by every session bound to it", async () => {
    const { root, data, db } = scratch();
    try {
      makeData(data, "t1", "old");
      const scope = stateScope(data);
      await using s = await session<typeof sqlite>(worker, {
        ...captureLog(),
        permissions: { read: [root], write: [root] },
        setup: [["open", db]],
        scope,
      });
      await s.all("select v from t1");
      rmSync(data, { recursive: true });
      makeData(data, "t2", "new");
      assert.deepEqual(await s.all("select v from t2"), [{ v: "new" }]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("watch and scope refuse values that are not paths or scopes", async () => {
    await assert.rejects(
      session(worker, { watch: 5 as unknown as string }),
      TypeError,
    );
    assert.throws(
      () => pool(worker, { scope: {} as ReturnType<typeof stateScope> }),
      /scope/,
    );
  });
});
