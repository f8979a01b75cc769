// The native confine step (issue 23 item 3) sits in each worker's sandbox
// as a file bubblewrap made from bytes the parent handed it: a hostile
// worker must gain nothing from it. It runs before the worker and is gone
// at execve; what is left is its path. The worker cannot read it (Landlock),
// write, remove or replace it (a read-only mount), nor reach a sibling's
// copy (each worker has its own mount namespace); nothing of the step's
// own (the variable a Deno parent passes the command in, the held
// variables) reaches the worker's environment.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { session } from "../../mod.ts";
import type confine from "../fixtures/security/confine_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needs } from "../_helpers/tools.ts";
import {
  NATIVE_CONFINE_PATH,
  nativeConfineElf,
} from "../../src/runtime/sandbox/native_step.ts";
import process from "node:process";

checkNoLeaks();

const worker = fixture("security/confine_worker.ts");

function options() {
  return {
    ...captureLog(),
    sandbox: "os" as const,
    // Deno needs ffi for the fixture's native calls; none are made here.
    permissions: RUNTIME === "deno" ? { ffi: true } : {},
  };
}

describe("native confine step", {
  ...needs("bwrap", "landlock"),
  ...(nativeConfineElf(process.arch) === undefined
    ? { skip: `no native confine step for ${process.arch}` }
    : process.env.AIRLOCK_RUNTIME_CONFINE_STEP === "1"
    ? { skip: "AIRLOCK_RUNTIME_CONFINE_STEP=1: the runtime step runs" }
    : {}),
}, () => {
  test("a worker cannot read, overwrite or remove its native confine step, nor its sibling's", async () => {
    await using a = await session<typeof confine>(worker, options());
    await using b = await session<typeof confine>(worker, options());
    assert.deepEqual(a.stats().sandboxes, ["bwrap", "landlock"]);
    for (const s of [a, b]) {
      // There (Landlock refuses it; a missing file would be ENOENT), on
      // Bun, whose reads no runtime flag answers first.
      if (RUNTIME === "bun") {
        assert.equal(await s.read(NATIVE_CONFINE_PATH), "EACCES");
      }
      assert.notEqual(await s.read(NATIVE_CONFINE_PATH), "ok");
      assert.notEqual(await s.write(NATIVE_CONFINE_PATH), "ok");
      assert.notEqual(await s.remove(NATIVE_CONFINE_PATH), "ok");
    }
    // A new worker after them starts through an intact step.
    await using c = await session<typeof confine>(worker, options());
    assert.equal(await c.runtime(), RUNTIME);
  });

  test("a worker's environment holds nothing of the step's", async () => {
    // Deno's flags must let it read its environment (all of it, as Bun).
    await using s = await session<typeof confine>(worker, {
      ...options(),
      env: { MARKER: "kept" },
      ...(RUNTIME === "deno" ? { permissions: { ffi: true, env: true } } : {}),
    });
    const names = await s.environNames();
    assert.ok(names.includes("MARKER"), names.join(" "));
    for (const name of names) {
      assert.ok(!name.startsWith("AIRLOCK_CONFINE_HELD_"), name);
      assert.notEqual(name, "AIRLOCK_SPAWN_ARGV");
    }
  });
});
