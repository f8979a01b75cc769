// Attack class (low): options that mean different things per runtime. Env
// names with "=" or empty were accepted on Deno and refused on Bun (by the
// sandbox); net: ["*"] started a Bun worker (whole network) and failed on
// Deno. One validation now runs before anything spawns, on both runtimes.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { session } from "../../mod.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { checkNoLeaks, liveChildren } from "../_helpers/processes.ts";
import { HOSTILE } from "./_sandbox.ts";

checkNoLeaks();

async function refused(options: Parameters<typeof session>[1]) {
  const before = liveChildren().length;
  const error = await session(HOSTILE, options).then(
    (s) => s.close().then(() => undefined),
    (e: unknown) => e,
  );
  assert.equal(liveChildren().length, before, "nothing spawned");
  return error;
}

describe("one validation for env and net", () => {
  for (const runtime of ["deno", "bun"] as const) {
    test(`env names with "=" or empty are refused for a ${runtime} worker before spawning`, async () => {
      for (const name of ["A=B", ""]) {
        const error = await refused({ runtime, env: { [name]: "x" } });
        assert.ok(error instanceof RangeError, `${name}: ${error}`);
        assert.match(error.message, /env/);
      }
    });

    test(`net: ["*"] is refused for a ${runtime} worker, naming net: true`, async () => {
      const error = await refused({ runtime, permissions: { net: ["*"] } });
      assert.ok(error instanceof RangeError, String(error));
      assert.match(error.message, /net: true/);
    });
  }

  test("net scopes Deno accepts are accepted, the others refused", () => {
    for (
      const scope of [
        "example.com",
        "db.internal:5432",
        "*.example.com",
        "1.2.3.4:80",
        "[::1]:8080",
        ":8080",
      ]
    ) {
      assert.deepEqual(
        resolvePermissions({ net: [scope] }, "/app").net,
        [scope],
      );
    }
    for (
      const scope of ["*", "host:99999", "a..b", "http://x", "x/y", "[zz]"]
    ) {
      assert.throws(
        () => resolvePermissions({ net: [scope] }, "/app"),
        RangeError,
        scope,
      );
    }
  });
});
