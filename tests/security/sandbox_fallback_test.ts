// Attack class: a silent fallback to weaker confinement. Once a worker of a
// parent process may write the confine step's cache (or code), the Landlock
// step is refused for the rest of that process (tamper protection). Where
// bubblewrap cannot run, a Deno worker under sandbox "auto" then ran under
// Deno's flags alone, with no error: in one Bun test process symlink_test's
// Deno worker read a file through a link out of its grant. Fixed: a backend
// that exists but was refused (or failed a check) is a PermissionError
// naming the cause and the fix, for Deno as for Bun; where bubblewrap runs
// it confines alone. Both steps run in one separate parent process (the
// runtime running this file), as the refusal lasts for that process.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { scratchDir } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool } from "../_helpers/tools.ts";
import { sandboxSkip } from "./_sandbox.ts";

checkNoLeaks();

const parent = fileURLToPath(
  new URL("../fixtures/security/fallback_parent.ts", import.meta.url),
);
const root = scratchDir("sandbox-fallback");
after(() => root[Symbol.dispose]());

type Outcome = {
  started?: boolean;
  read?: { ok: boolean; value?: unknown; error?: string };
  error?: string;
  message?: string;
  permission?: string;
};

describe("no silent fallback from a refused OS backend", {
  skip: sandboxSkip(),
}, () => {
  test("after a worker granted write on the confine step's cache, a deno worker is refused or confined, never run under Deno's flags alone", () => {
    const argv = RUNTIME === "deno"
      ? ["run", "-A", "--quiet", parent, root.path]
      : [parent, root.path];
    const result = spawnSync(process.execPath, argv, {
      encoding: "utf8",
      timeout: 240_000,
    });
    assert.equal(result.status, 0, String(result.stderr));
    const answer = JSON.parse(String(result.stdout).trim()) as Record<
      "writer" | "deno" | "bun" | "bestEffort",
      Outcome
    >;
    // Bun's confine step runs on Bun, not from Deno's cache: Landlock (or
    // bubblewrap) confines it either way, and the link leads nowhere.
    assert.equal(answer.bun.started, true, JSON.stringify(answer.bun));
    assert.equal(answer.bun.read?.ok, false, JSON.stringify(answer.bun));
    // permissions.enforce "best-effort" opts out explicitly: it starts.
    assert.deepEqual(answer.bestEffort, { started: true });
    if (hasTool("bwrap")) {
      // bubblewrap confines alone: the link leads nowhere.
      assert.deepEqual(answer.writer, { started: true });
      assert.equal(answer.deno.started, true, JSON.stringify(answer.deno));
      assert.equal(answer.deno.read?.ok, false, JSON.stringify(answer.deno));
      return;
    }
    // Landlock is here but refused for Deno's confine step, and bubblewrap
    // cannot run: every Deno start of this process fails, naming the
    // backend, the cause and the fix.
    for (const runtime of ["writer", "deno"] as const) {
      const outcome = answer[runtime];
      assert.equal(outcome.error, "PermissionError", JSON.stringify(outcome));
      assert.equal(outcome.permission, "sandbox");
      assert.match(
        outcome.message ?? "",
        /Landlock backend, which this machine has, was refused: the confine step's .* which a worker may write/,
      );
      assert.match(outcome.message ?? "", /make bubblewrap usable/);
      assert.match(outcome.message ?? "", /permissions\.enforce "best-effort"/);
    }
  });
});
