// A sandboxed Deno worker's private code cache: its warm-up runs without
// blocking the parent (asynchronous, bounded by the start's deadline), and
// the cache directory stays bounded (launch/warm_up.ts, launch/code_cache.ts).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import process from "node:process";
import { session, WorkerTimeoutError } from "../../mod.ts";
import {
  captureLog,
  checkNoLeaks,
  needsSandbox,
  rejection,
  scratchDir,
} from "../_helpers.ts";

checkNoLeaks();

// A cache of this file's own: the machine's real one is never touched.
const root = scratchDir("code-cache");
after(() => root[Symbol.dispose]());
const xdg = root.join("xdg-cache");
mkdirSync(xdg);
process.env.XDG_CACHE_HOME = xdg;
delete process.env.DENO_DIR;
const caches = join(xdg, "deno", "airlock-code");

/** Writes a worker module whose import waits `ms` before defining it. */
function slowModule(name: string, ms: number): URL {
  const module = root.join(name);
  writeFileSync(
    module,
    `import { defineWorker } from ${
      JSON.stringify(new URL("../../worker.ts", import.meta.url).href)
    };
await new Promise((resolve) => setTimeout(resolve, ${ms}));
export default defineWorker({ ping: () => "pong" });
`,
  );
  return pathToFileURL(module);
}

test(
  "a deno module that hangs at import does not block the parent's event loop during its warm-up",
  needsSandbox(),
  async () => {
    const module = slowModule("hangs.ts", 600_000);
    // A timer that should fire every 25 ms while the start is pending: the
    // largest gap between two of its firings (or between the start and its
    // first firing) shows how long the event loop was blocked.
    const ticks: number[] = [];
    let last = performance.now();
    let worst = 0;
    const interval = setInterval(() => {
      const now = performance.now();
      worst = Math.max(worst, now - last);
      last = now;
      ticks.push(now);
    }, 25);
    try {
      // The warm-up (up to 10 s per start, twice for an empty cache) used to
      // run synchronously inside this call.
      const starting = session<{ ping(): string }>(module, {
        ...captureLog(),
        runtime: "deno",
        sandbox: "os",
        startTimeoutMs: 1_500,
      });
      const error = await rejection(starting, WorkerTimeoutError);
      assert.equal(error.phase, "start");
      assert.equal(error.timeoutMs, 1_500);
      // Ended while waiting for the warm-up: no worker was spawned.
      assert.equal(error.pid, undefined);
      // The timer kept firing while the start was pending.
      assert.ok(ticks.length >= 5, `${ticks.length} firings`);
      assert.ok(worst < 1_000, `the event loop was blocked for ${worst} ms`);
    } finally {
      clearInterval(interval);
    }
    // Timed out: not marked as warmed.
    const marked = existsSync(caches)
      ? readdirSync(caches).filter((key) =>
        existsSync(join(caches, key, "airlock-warmed"))
      )
      : [];
    assert.deepEqual(marked, []);
  },
);

test(
  "concurrent starts of a deno module wait for its warm-up, which marks its cache",
  needsSandbox(),
  async () => {
    const module = slowModule("quick.ts", 0);
    const options = {
      ...captureLog(),
      runtime: "deno" as const,
      sandbox: "os" as const,
    };
    const [a, b] = await Promise.all([
      session<{ ping(): string }>(module, options),
      session<{ ping(): string }>(module, options),
    ]);
    try {
      assert.equal(await a.ping(), "pong");
      assert.equal(await b.ping(), "pong");
    } finally {
      await a.close();
      await b.close();
    }
    const marked = readdirSync(caches).filter((key) =>
      existsSync(join(caches, key, "airlock-warmed"))
    );
    assert.equal(marked.length, 1);
  },
);
