// Attack class: Deno web storage without grants. With nothing granted,
// localStorage survived a restart and the Cache API wrote into the user's
// DENO_DIR/location_data. A sandboxed Deno worker's web storage now lives in
// a private tmpfs inside its own cache directory: gone with the process,
// never in the user's DENO_DIR. Under Landlock without bubblewrap there is no
// private tmpfs and web storage is refused.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { session } from "../../mod.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { HOSTILE, sandboxSkip } from "./_sandbox.ts";
import type hostile from "../fixtures/security/hostile_worker.ts";

checkNoLeaks();

const SKIP = sandboxSkip();

function denoDir(): string | undefined {
  if (process.env.DENO_DIR) return process.env.DENO_DIR;
  const cache = process.env.XDG_CACHE_HOME ??
    (process.env.HOME ? join(process.env.HOME, ".cache") : undefined);
  return cache ? join(cache, "deno") : undefined;
}

function locationEntries(): string[] {
  const dir = denoDir();
  if (dir === undefined) return [];
  const location = join(dir, "location_data");
  return existsSync(location) ? readdirSync(location) : [];
}

describe("web storage", () => {
  test("localStorage of a Deno worker does not survive a restart", {
    skip: SKIP,
  }, async () => {
    await using s = await session<typeof hostile>(HOSTILE, { runtime: "deno" });
    const first = await s.localStorage("first");
    if (!s.stats().sandboxes.includes("bwrap")) {
      // Landlock alone: no private tmpfs, and the cache's web storage
      // directory is shared by every worker of the module, so it is
      // read-only: web storage is refused.
      assert.deepEqual(first, { ok: false, error: "EACCES" });
      return;
    }
    assert.equal(first.ok, true, JSON.stringify(first));
    assert.deepEqual(
      await s.localStorage("second"),
      { ok: true, value: "first" },
      "within one process it works",
    );
    await s.restart();
    assert.deepEqual(await s.localStorage("third"), { ok: true, value: null });
  });

  test(
    "the Cache API of a Deno worker writes nothing into the user's DENO_DIR",
    {
      skip: SKIP,
    },
    async () => {
      const before = locationEntries();
      await using s = await session<typeof hostile>(HOSTILE, {
        runtime: "deno",
      });
      const url = "https://example.invalid/airlock-test";
      if (!s.stats().sandboxes.includes("bwrap")) {
        // Landlock alone: refused (see above), and nothing written.
        assert.equal((await s.cacheApi(url)).ok, false);
        assert.deepEqual(locationEntries(), before);
        return;
      }
      assert.equal((await s.cacheApi(url)).ok, true);
      assert.deepEqual(await s.cacheApi(url), { ok: true, value: "cached" });
      await s.restart();
      assert.deepEqual(await s.cacheApi(url), { ok: true, value: null });
      assert.deepEqual(locationEntries(), before);
    },
  );
});
