// A sandboxed Deno worker's private code cache: its warm-up runs without
// blocking the parent (asynchronous, bounded by the start's deadline), and
// the cache directory stays bounded (launch/warm_up.ts, launch/code_cache.ts).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import process from "node:process";
import { spawn } from "node:child_process";
import { oneShot, session, WorkerTimeoutError } from "../../mod.ts";
import { scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, liveChildren } from "../_helpers/processes.ts";
import { needsSandbox } from "../_helpers/tools.ts";
import { rejection, until, within } from "../_helpers/wait.ts";
import {
  markWarmUpStuck,
  prepareCodeCache,
  PRUNE_EVERY_MS,
  pruneCodeCaches,
  PRUNED_MARK,
  prunedRecently,
  STUCK_MARK,
  STUCK_RETRY_MS,
  USED_MARK,
  warmUpStuckRecently,
} from "../../src/runtime/launch/code_cache.ts";

checkNoLeaks();

// A cache of this file's own: the machine's real one is never touched.
const root = scratchDir("code-cache");
after(() => root[Symbol.dispose]());
const xdg = root.join("xdg-cache");
mkdirSync(xdg);
process.env.XDG_CACHE_HOME = xdg;
delete process.env.DENO_DIR;
const caches = join(xdg, "deno", "airlock-code");

/**
 * Runs `script` in a process of this runtime (stdin piped, stdout and stderr
 * gathered into one text).
 */
function runScript(script: string) {
  const bun = typeof (globalThis as { Bun?: unknown }).Bun === "object";
  const child = spawn(
    process.execPath,
    bun ? [script] : ["run", "-A", "--quiet", script],
    {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, NO_COLOR: "1" },
    },
  );
  let out = "";
  const gather = (data: Uint8Array) => {
    out += new TextDecoder().decode(data);
  };
  child.stdout.on("data", gather);
  child.stderr.on("data", gather);
  const exited = new Promise<number | null>((resolve) =>
    child.on("exit", (code) => resolve(code))
  );
  return { child, exited, output: () => out };
}

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
      // Blocked by the warm-up, the loop stood still for its whole 10 s; a
      // machine with both cores busy delays a timer by up to 2.6 s.
      assert.ok(worst < 4_000, `the event loop was blocked for ${worst} ms`);
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
    // The process recorded its use of it (what pruning goes by).
    assert.ok(existsSync(join(caches, marked[0] as string, USED_MARK)));
  },
);

test("pruning keeps the newest caches and never one in use", async () => {
  using dir = scratchDir("prune");
  const shared = dir.join("remote");
  mkdirSync(shared);
  writeFileSync(join(shared, "module.js"), "kept");
  const now = Date.now();
  const HOUR = 60 * 60 * 1000;
  /** A cache last used `hoursAgo` ago, with a link to a shared cache. */
  const make = (index: number, hoursAgo: number): string => {
    const name = index.toString(16).padStart(32, "0");
    const cache = dir.join("airlock-code", name);
    mkdirSync(cache, { recursive: true });
    symlinkSync(shared, join(cache, "remote"));
    const mark = join(cache, USED_MARK);
    writeFileSync(mark, "");
    const at = new Date(now - hoursAgo * HOUR);
    utimesSync(mark, at, at);
    utimesSync(cache, at, at);
    return cache;
  };
  // Used 1 to 8 hours ago: #1 the newest, #8 the oldest (in use).
  const caches = [1, 2, 3, 4, 5, 6, 7, 8].map((hours) => make(hours, hours));
  const inUse = caches[7] as string;
  // Not a cache: left alone.
  mkdirSync(dir.join("airlock-code", "other"));
  const removed = await pruneCodeCaches(dir.join("airlock-code"), {
    maxEntries: 3,
    maxAgeMs: 1_000 * HOUR,
    graceMs: HOUR / 2,
    inUse: (cache) => cache === inUse,
    now,
  });
  // The one in use takes one of the 3 places; the 2 newest keep the rest.
  assert.deepEqual(removed.sort(), caches.slice(2, 7).sort());
  assert.deepEqual(
    readdirSync(dir.join("airlock-code")).sort(),
    ["other", ...[1, 2, 8].map((i) => i.toString(16).padStart(32, "0"))]
      .sort(),
  );
  // The links were removed, not followed.
  assert.ok(existsSync(join(shared, "module.js")));
  // Unused for longer than maxAgeMs: removed whatever the count (and the
  // one in use, however old, never).
  const old = await pruneCodeCaches(dir.join("airlock-code"), {
    maxEntries: 10,
    maxAgeMs: 1.5 * HOUR,
    graceMs: HOUR / 2,
    inUse: (cache) => cache === inUse,
    now,
  });
  assert.deepEqual(old, [caches[1]]);
  assert.ok(existsSync(inUse));
  assert.ok(existsSync(caches[0] as string));
});

test("pruning removes at most maxRemovals caches, the least recently used first", async () => {
  using dir = scratchDir("prune-cap");
  const root = dir.join("airlock-code");
  const now = Date.now();
  const HOUR = 60 * 60 * 1000;
  const names = [1, 2, 3, 4, 5].map((hours) => {
    const name = hours.toString(16).padStart(32, "0");
    mkdirSync(join(root, name), { recursive: true });
    const at = new Date(now - hours * HOUR);
    utimesSync(join(root, name), at, at);
    return name;
  });
  const removed = await pruneCodeCaches(root, {
    maxEntries: 1,
    graceMs: 0,
    inUse: () => false,
    now,
    maxRemovals: 2,
  });
  assert.deepEqual(removed, [join(root, names[4]!), join(root, names[3]!)]);
  assert.deepEqual(readdirSync(root).sort(), names.slice(0, 3));
});

test("pruning keeps a cache used within the grace period, even beyond the count", async () => {
  using dir = scratchDir("prune-grace");
  const root = dir.join("airlock-code");
  const now = Date.now();
  const names = ["a", "b", "c"].map((c) => c.repeat(32));
  for (const name of names) mkdirSync(join(root, name), { recursive: true });
  const removed = await pruneCodeCaches(root, {
    maxEntries: 1,
    graceMs: 60_000,
    inUse: () => false,
    now,
  });
  assert.deepEqual(removed, []);
  assert.equal(readdirSync(root).length, 3);
});

test(
  "aborting a oneShot call during its module's warm-up ends the start and the warm-up",
  needsSandbox(),
  async () => {
    const module = slowModule("hangs_abort.ts", 600_000);
    const run = oneShot<{ ping(): string }>(module, {
      ...captureLog(),
      runtime: "deno",
      sandbox: "os",
      startTimeoutMs: 120_000,
    });
    const controller = new AbortController();
    const call = run.call("ping", [], { signal: controller.signal });
    // The warm-up runs (the only child: the worker would start after it).
    await until(() => liveChildren().length > 0, 30_000, "the warm-up starts");
    const reason = new Error("stop");
    controller.abort(reason);
    assert.equal(await call.then(() => undefined, (e: unknown) => e), reason);
    // The start ended with the abort: nothing waits for the warm-up (10 s per
    // start) or the worker's start (120 s) any more.
    await within(run.close(), 5_000, "close() after the abort");
    await until(
      () => liveChildren().length === 0,
      5_000,
      "the warm-up is killed",
    );
  },
);

/** Starts `count` sessions of `module` at once and calls each (closed after). */
async function startMany(module: URL, count: number): Promise<string[]> {
  const started = await Promise.allSettled(
    Array.from({ length: count }, () =>
      session<{ ping(): string }>(module, {
        ...captureLog(),
        runtime: "deno",
        sandbox: "os",
      })),
  );
  try {
    const failed = started.find((result) => result.status === "rejected");
    if (failed !== undefined) throw failed.reason;
    return await Promise.all(
      started.map((result) =>
        (result as PromiseFulfilledResult<{ ping(): Promise<string> }>).value
          .ping()
      ),
    );
  } finally {
    for (const result of started) {
      if (result.status === "fulfilled") await result.value.close();
    }
  }
}

test(
  "concurrent starts of a fresh deno module in this process and two others all start (no race on the cache's location_data)",
  needsSandbox(),
  async () => {
    const module = slowModule("race.ts", 0);
    // Each other parent starts three workers of the same module at once,
    // when told to (so that the processes' preparations and warm-ups overlap).
    const script = root.join("race_parent.ts");
    writeFileSync(
      script,
      `import process from "node:process";
import { session } from ${
        JSON.stringify(new URL("../../mod.ts", import.meta.url).href)
      };
const module = new URL(${JSON.stringify(module.href)});
await new Promise((resolve) => process.stdin.once("data", resolve));
const started = await Promise.allSettled([0, 1, 2].map(() =>
  session(module, { runtime: "deno", sandbox: "os", onStderr: () => {} })
));
let code = 0;
for (const result of started) {
  if (result.status === "rejected") {
    console.log(JSON.stringify({ error: String(result.reason?.message ?? result.reason) }));
    code = 1;
  } else {
    console.log(JSON.stringify({ ping: await result.value.ping() }));
    await result.value.close();
  }
}
process.exit(code);
`,
    );
    const parents = [0, 1].map(() => runScript(script));
    try {
      for (const parent of parents) parent.child.stdin.end("go\n");
      const [mine, ...codes] = await Promise.all([
        startMany(module, 4),
        ...parents.map((parent) => parent.exited),
      ]);
      assert.deepEqual(mine, ["pong", "pong", "pong", "pong"]);
      parents.forEach((parent, index) => {
        assert.equal(codes[index], 0, parent.output());
        assert.equal(
          parent.output().trim().split("\n").filter((line) =>
            line === '{"ping":"pong"}'
          ).length,
          3,
          parent.output(),
        );
      });
    } finally {
      for (const parent of parents) parent.child.kill("SIGKILL");
      await Promise.all(parents.map((parent) => parent.exited));
    }
  },
);

test("preparing a cache never removes its web storage directory, repairs what is wrong and leaves nothing beside", () => {
  const parent = root.join("prepare-deno");
  const dir = join(parent, "airlock-code", "0".repeat(32));
  prepareCodeCache(dir, parent);
  const location = join(dir, "location_data");
  // What another start's bubblewrap may have mounted over meanwhile: it stays.
  writeFileSync(join(location, "kept"), "");
  prepareCodeCache(dir, parent);
  assert.ok(existsSync(join(location, "kept")));
  // A file in its place and a link to elsewhere: repaired.
  rmSync(location, { recursive: true });
  writeFileSync(location, "");
  rmSync(join(dir, "remote"));
  symlinkSync("/", join(dir, "remote"));
  prepareCodeCache(dir, parent);
  assert.ok(lstatSync(location).isDirectory());
  assert.equal(readlinkSync(join(dir, "remote")), join(parent, "remote"));
  assert.equal(readlinkSync(join(dir, "npm")), join(parent, "npm"));
  assert.deepEqual(readdirSync(dir).sort(), ["location_data", "npm", "remote"]);
});

test("processes preparing the same fresh caches at once never fail nor remove what another made", async () => {
  const parent = root.join("prepare-race-deno");
  const base = join(parent, "airlock-code");
  const script = root.join("prepare_race.ts");
  writeFileSync(
    script,
    `import process from "node:process";
import { lstatSync } from "node:fs";
import { join } from "node:path";
import { prepareCodeCache } from ${
      JSON.stringify(
        new URL("../../src/runtime/launch/code_cache.ts", import.meta.url).href,
      )
    };
console.log("ready");
await new Promise((resolve) => process.stdin.once("data", resolve));
const failures = [];
for (let i = 0; i < 300; i++) {
  const dir = join(${JSON.stringify(base)}, i.toString(16).padStart(32, "0"));
  try {
    prepareCodeCache(dir, ${JSON.stringify(parent)});
    if (!lstatSync(join(dir, "location_data")).isDirectory()) {
      failures.push(i + ": location_data not a directory");
    }
  } catch (error) {
    failures.push(i + ": " + String(error?.message ?? error));
  }
}
console.log(JSON.stringify(failures.slice(0, 5)));
process.exit(0);
`,
  );
  const children = [0, 1, 2].map(() => runScript(script));
  try {
    // Each waits until all are loaded, then they prepare the same 300 caches.
    await until(
      () => children.every((c) => c.output().startsWith("ready\n")),
      60_000,
      "the three processes ready",
    );
    for (const c of children) c.child.stdin.end("go\n");
    const codes = await Promise.all(children.map((c) => c.exited));
    children.forEach((c, index) => {
      assert.equal(codes[index], 0, c.output());
      assert.equal(c.output(), "ready\n[]\n");
    });
  } finally {
    for (const c of children) c.child.kill("SIGKILL");
    await Promise.all(children.map((c) => c.exited));
  }
});

test("a warm-up that ran past its timeout is skipped by every process for STUCK_RETRY_MS, then tried again", () => {
  const dir = root.join("stuck-warm-up");
  mkdirSync(dir);
  assert.equal(warmUpStuckRecently(dir), false, "never stuck");
  const at = 1_700_000_000_000;
  markWarmUpStuck(dir, at);
  assert.equal(warmUpStuckRecently(dir, at), true);
  assert.equal(warmUpStuckRecently(dir, at + STUCK_RETRY_MS - 1), true);
  assert.equal(warmUpStuckRecently(dir, at + STUCK_RETRY_MS), false);
  // A clock set back, or a mark that is not a time: tried again.
  assert.equal(warmUpStuckRecently(dir, at - 1), false);
  writeFileSync(join(dir, STUCK_MARK), "not a time");
  assert.equal(warmUpStuckRecently(dir, at), false);
  // A directory it cannot write: not recorded, no throw.
  markWarmUpStuck(join(dir, "missing", "deeper"), at);
});

test("the caches are pruned at most once per PRUNE_EVERY_MS, by all processes together", async () => {
  using dir = scratchDir("pruned-mark");
  const now = Date.now();
  assert.equal(await prunedRecently(dir.path, now), false, "never pruned");
  assert.ok(existsSync(join(dir.path, PRUNED_MARK)));
  assert.equal(await prunedRecently(dir.path, now + 1_000), true);
  // Past the interval, or a mark from the future: due again.
  assert.equal(
    await prunedRecently(dir.path, now + PRUNE_EVERY_MS + 1_000),
    false,
  );
  const future = new Date(Date.now() + 3_600_000);
  utimesSync(join(dir.path, PRUNED_MARK), future, future);
  assert.equal(await prunedRecently(dir.path), false);
});
