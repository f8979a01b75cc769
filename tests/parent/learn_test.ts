// Learn mode (unstable_learn.ts): one run finds what a Deno worker touched.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  learnPermissions,
  permissionsFromAudit,
} from "../../unstable_learn.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";

checkNoLeaks();

const dir = realpathSync(mkdtempSync(join(tmpdir(), "airlock-learn-test-")));
after(() => rmSync(dir, { recursive: true, force: true }));

describe("learnPermissions()", () => {
  test("learnPermissions() suggests exactly the accesses a Deno worker made", async () => {
    const learned = await learnPermissions(fixture("learn_worker.ts"), {
      calls: [["work", join(dir, "data.txt")]],
      env: { DB_URL: "postgres://db" },
      cwd: dir,
    });
    assert.deepEqual(learned.permissions, {
      read: ["./data.txt"],
      write: ["./data.txt"],
      env: ["DB_URL"],
      sys: ["hostname"],
    });
    assert.ok(learned.unseen.some((line) => line.includes("native code")));
    // The suggestion is a valid permissions option.
    resolvePermissions(learned.permissions, dir);
  });

  test("permissionsFromAudit() skips airlock's own variables, its audit file and lines that are not entries", () => {
    const log = [
      '{"v":1,"permission":"env","value":"NO_COLOR"}',
      '{"v":1,"permission":"env","value":"DENO_AUDIT_PERMISSIONS"}',
      '{"v":1,"permission":"write","value":"/tmp/learn/audit.jsonl"}',
      "not json",
      '{"v":1,"permission":"net","value":"db.internal:5432"}',
      '{"v":1,"permission":"net","value":"db.internal:5432"}',
      '{"v":1,"permission":"read","value":"/srv/ref/data.bin"}',
    ].join("\n");
    const learned = permissionsFromAudit(log, "/app", ["/tmp/learn"]);
    assert.deepEqual(learned.permissions, {
      read: ["/srv/ref/data.bin"],
      net: ["db.internal:5432"],
    });
    assert.equal(learned.accesses.length, 2);
  });
});
