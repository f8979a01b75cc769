// The confine step runs before any confinement, so its code must be beyond
// every worker's reach: a worker granted write access to airlock's own
// directory could rewrite workers/confine.ts, and the next start would run
// that code unconfined. Landlock is then refused: bubblewrap confines alone
// where it can, and where it cannot the worker does not start.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool, needs } from "../_helpers/tools.ts";

checkNoLeaks();

const parent = fileURLToPath(
  new URL("../fixtures/security/tamper_parent.ts", import.meta.url),
);

describe("confine step tampering", needs("landlock"), () => {
  test("a worker granted write on the directory of airlock's confine step gets no Landlock step", () => {
    const argv = RUNTIME === "deno"
      ? ["run", "-A", "--quiet", parent]
      : [parent];
    const result = spawnSync(process.execPath, argv, {
      encoding: "utf8",
      timeout: 120_000,
    });
    assert.equal(result.status, 0, String(result.stderr));
    const answer = JSON.parse(String(result.stdout).trim()) as {
      sandboxes?: string[];
      error?: string;
      message?: string;
    };
    if (hasTool("bwrap")) {
      assert.deepEqual(answer.sandboxes, ["bwrap"]);
    } else {
      assert.equal(answer.error, "PermissionError");
      assert.match(
        answer.message ?? "",
        /the confine step's .* which a worker may write/,
      );
    }
  });
});
