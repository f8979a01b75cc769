// Attack class: configuration a runtime reads from the worker's working
// directory. Bun reads the `bunfig.toml` of its cwd and runs its `preload`
// (resolved against the cwd) before the program: a Bun worker granted write
// on a directory planted a `bunfig.toml` and a preload there, and a later Bun
// worker whose `cwd` it was (granted only read there) ran the planted code
// with its own grants. Fixed: every Bun worker starts with
// `--config=/dev/null` (launch/self_exec_command.ts, BUN_WORKER_FLAGS), as
// the confine step and the entry's build already did.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { sandboxSkip } from "./_sandbox.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");

/** What the planter writes: a bunfig.toml and the module it preloads. */
const PLANT =
  `fs.writeFileSync(arg + "/bunfig.toml", 'preload = ["./planted.js"]\\n');
fs.writeFileSync(arg + "/planted.js", 'globalThis.PLANTED = "code of another worker";');
return "planted";`;

describe("a bunfig.toml in a bun worker's cwd", { skip: sandboxSkip() }, () => {
  test("a bunfig.toml preload planted by one bun worker never runs in a later bun worker with that cwd", async () => {
    using dir = scratchDir("bunfig-plant");
    const shared = dir.join("shared");
    mkdirSync(shared);
    {
      await using planter = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: "bun",
        permissions: { write: [shared] },
      });
      assert.deepEqual(await planter.run(PLANT, shared), {
        ok: true,
        value: "planted",
      });
    }
    assert.ok(existsSync(join(shared, "bunfig.toml")));
    for (const restart of [false, true]) {
      await using victim = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: "bun",
        cwd: shared,
        permissions: { read: [shared] },
      });
      if (restart) await victim.restart();
      // The victim sees the planted files (the test means something) and
      // ran none of them.
      assert.deepEqual(
        await victim.run(
          `return [fs.readFileSync("bunfig.toml", "utf8").includes("planted.js"), globalThis.PLANTED ?? "clean"]`,
        ),
        { ok: true, value: [true, "clean"] },
      );
    }
  });
});
