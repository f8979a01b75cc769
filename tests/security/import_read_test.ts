// Attack class: a Deno worker with nothing granted reads files by importing
// them (import() and static imports load local files without Deno's read
// check: /etc/shadow came back in a SyntaxError, a .env leaked through a
// ReferenceError, JSON outside every grant came back whole). Deno workers
// now always run in the OS sandbox where one exists, which shows them only
// their code and their grants.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { session } from "../../mod.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { HOSTILE, sandboxSkip } from "./_sandbox.ts";
import type hostile from "../fixtures/security/hostile_worker.ts";

checkNoLeaks();

const SKIP = sandboxSkip();
const secrets = realpathSync(mkdtempSync(join(tmpdir(), "airlock-import-")));
after(() => rmSync(secrets, { recursive: true, force: true }));
const json = join(secrets, "secret.json");
writeFileSync(json, JSON.stringify({ password: "hunter2" }));
const script = join(secrets, "secret.ts");
writeFileSync(script, 'export const password = "hunter2";\n');

describe("reads by import", () => {
  for (const runtime of ["deno", "bun"] as const) {
    test(
      `a ${runtime} worker with nothing granted cannot import files outside its code (default sandbox "auto")`,
      {
        skip: SKIP,
      },
      async () => {
        await using s = await session<typeof hostile>(HOSTILE, { runtime });
        for (const file of [json, script]) {
          const outcome = await s.importFile(pathToFileURL(file).href);
          assert.equal(
            outcome.ok,
            false,
            `${file}: ${JSON.stringify(outcome)}`,
          );
          assert.doesNotMatch(JSON.stringify(outcome), /hunter2/);
        }
        const shadow = await s.importFile("file:///etc/passwd");
        assert.equal(shadow.ok, false);
        assert.doesNotMatch(JSON.stringify(shadow), /root:/);
      },
    );
  }

  test("a granted file can still be imported", { skip: SKIP }, async () => {
    await using s = await session<typeof hostile>(HOSTILE, {
      runtime: "deno",
      permissions: { read: [secrets] },
    });
    const outcome = await s.importFile(pathToFileURL(script).href);
    assert.equal(outcome.ok, true, JSON.stringify(outcome));
  });
});
