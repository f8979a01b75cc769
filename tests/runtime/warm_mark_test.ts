// The warm mark of a sandboxed Deno worker's code cache (issue 23 item 2;
// launch/warm_up.ts, launch/code_cache.ts): a later process of the same
// program runs no warm-up start while nothing the warm-up compiled changed;
// an edited module or dependency warms up again; and a mark that is wrong
// (stale) costs speed only: Deno checks its cached code against the source
// and runs what the file holds now.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { fixture, scratchDir, writeSettled } from "../_helpers/files.ts";
import { scriptArgs } from "../_helpers/runtime.ts";
import { needsSandbox } from "../_helpers/tools.ts";
import {
  markWarm,
  WARM_MARK,
  warmMarkCurrent,
} from "../../src/runtime/launch/warm_mark.ts";

const root = scratchDir("warm-mark");
after(() => root[Symbol.dispose]());
// A Deno cache of this file's own, so that its caches are easy to find.
const denoDir = root.join("deno");
mkdirSync(denoDir);

/** A worker module `name.ts` whose `value()` is its dependency's word. */
function project(name: string, word: string): { module: URL; dep: string } {
  const dir = root.join(name);
  mkdirSync(dir);
  const dep = join(dir, "dep.ts");
  writeSettled(dep, `export const word: string = ${JSON.stringify(word)};\n`);
  const module = join(dir, `${name}.ts`);
  writeSettled(
    module,
    `import { defineWorker } from ${
      JSON.stringify(new URL("../../worker.ts", import.meta.url).href)
    };
import { word } from "./dep.ts";
export default defineWorker({ value: () => word });
`,
  );
  return { module: pathToFileURL(module), dep };
}

/** A fresh parent's one call: the answer and its warm-up starts. */
function freshParent(module: URL): { value: string; warmUps: number } {
  const script = fixture("start/warm_up_parent.ts").pathname;
  const out = execFileSync(
    process.execPath,
    scriptArgs(script, module.href),
    {
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1", DENO_DIR: denoDir },
      timeout: 120_000,
    },
  );
  return JSON.parse(out.trim().split("\n").at(-1) ?? "") as {
    value: string;
    warmUps: number;
  };
}

/** The code cache whose mark records `path`. */
function cacheOf(path: string): string {
  const caches = join(denoDir, "airlock-code");
  const found = readdirSync(caches).filter((key) => {
    try {
      return readFileSync(join(caches, key, WARM_MARK), "utf8").includes(
        JSON.stringify(path),
      );
    } catch {
      return false;
    }
  });
  assert.equal(found.length, 1, `caches whose mark records ${path}`);
  return join(caches, found[0] as string);
}

describe("the code cache's warm mark", needsSandbox(), () => {
  test("a second process of the same program runs no warm-up start; an edited dependency warms up once more", () => {
    const { module, dep } = project("second", "one");
    // A cache never warmed: two starts (the transpiled modules, then V8's).
    assert.deepEqual(freshParent(module), { value: "one", warmUps: 2 });
    assert.deepEqual(freshParent(module), { value: "one", warmUps: 0 });
    assert.deepEqual(freshParent(module), { value: "one", warmUps: 0 });
    // The mark names the module, its dependency and airlock's entry.
    const mark = JSON.parse(
      readFileSync(join(cacheOf(dep), WARM_MARK), "utf8"),
    ) as { files: Record<string, string> };
    for (const source of [module.pathname, dep]) {
      assert.match(mark.files[source] ?? "", /^\d+:\d+:\d+:\d+$/, source);
    }
    assert.ok(
      Object.keys(mark.files).some((path) =>
        path.endsWith("/workers/entry.ts")
      ),
    );
    writeSettled(dep, `export const word: string = "two";\n`);
    assert.deepEqual(freshParent(module), { value: "two", warmUps: 1 });
    assert.deepEqual(freshParent(module), { value: "two", warmUps: 0 });
  });

  test("an edited module warms up again", () => {
    const { module } = project("edited", "same");
    assert.equal(freshParent(module).warmUps, 2);
    writeSettled(
      module.pathname,
      readFileSync(module.pathname, "utf8").replace(
        "value: () => word",
        "value: () => `${word}, edited`",
      ),
    );
    assert.deepEqual(freshParent(module), {
      value: "same, edited",
      warmUps: 1,
    });
  });

  test("a stale mark costs speed only: the worker runs the dependency as it is now", () => {
    const { module, dep } = project("stale", "before");
    assert.equal(freshParent(module).warmUps, 2);
    const cache = cacheOf(dep);
    // Edited, and the mark then rewritten as if the warm-up had seen it:
    // the cache holds the old code, the mark says nothing changed.
    writeSettled(dep, `export const word: string = "after!";\n`);
    const sources = Object.keys(
      (JSON.parse(readFileSync(join(cache, WARM_MARK), "utf8")) as {
        files: Record<string, string>;
      }).files,
    );
    markWarm(cache, sources, Date.now());
    assert.equal(warmMarkCurrent(cache, sources), true);
    assert.deepEqual(freshParent(module), { value: "after!", warmUps: 0 });
  });
});

describe("markWarm() and warmMarkCurrent()", () => {
  test("a mark is current until a source it records changes; a source modified during the warm-up never is", () => {
    using dir = scratchDir("warm-mark-unit");
    const cache = dir.join("cache");
    mkdirSync(join(cache, "gen", "file", dir.path.slice(1)), {
      recursive: true,
      mode: 0o700,
    });
    const compiled = dir.join("compiled.ts");
    writeSettled(compiled, "export {};\n");
    // Deno's transpiled copy of it, where Deno puts it.
    writeFileSync(join(cache, "gen", "file", `${compiled.slice(1)}.js`), "");
    const binary = dir.join("deno");
    writeSettled(binary, "binary");
    markWarm(cache, [binary], Date.now());
    const recorded = JSON.parse(
      readFileSync(join(cache, WARM_MARK), "utf8"),
    ) as { files: Record<string, string> };
    assert.deepEqual(
      Object.keys(recorded.files).sort(),
      [binary, compiled].sort(),
    );
    assert.equal(warmMarkCurrent(cache, [binary]), true);
    // A source it does not record: not current.
    assert.equal(warmMarkCurrent(cache, [binary, dir.join("other")]), false);
    writeSettled(compiled, "export const changed = 1;\n");
    assert.equal(warmMarkCurrent(cache, [binary]), false);
    // Modified after the warm-up began: recorded, never current.
    writeFileSync(compiled, "export const during = 1;\n");
    markWarm(cache, [binary], Date.now() - 1_000);
    assert.equal(
      (JSON.parse(readFileSync(join(cache, WARM_MARK), "utf8")) as {
        files: Record<string, string>;
      }).files[compiled],
      "unsettled",
    );
    assert.equal(warmMarkCurrent(cache, [binary]), false);
  });
});
