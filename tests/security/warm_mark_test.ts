// The code cache's warm mark (launch/code_cache.ts) decides only whether a
// warm-up start runs, never what a worker runs: a mark someone else could
// write (a link, writable by others, another user's, in a cache directory
// others may write) is not read, a malformed one is not current, and a mark
// planted beside code planted in the cache makes no worker run that code
// (Deno checks its cached code against the source and the emit's hash, which
// catches damage, not a writer who makes the hashes match: what keeps a
// writer out is that no worker may write the cache, cache_poisoning_test).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
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
import {
  markWarmUpStuck,
  PRUNED_MARK,
  prunedRecently,
  STUCK_MARK,
  touchCodeCache,
  USED_MARK,
} from "../../src/runtime/launch/code_cache.ts";

const root = scratchDir("warm-mark-trust");
after(() => root[Symbol.dispose]());

/** A cache directory with a current mark recording one source. */
function markedCache(name: string): { cache: string; source: string } {
  const cache = root.join(name);
  mkdirSync(cache, { mode: 0o700 });
  const source = root.join(`${name}.ts`);
  writeSettled(source, "export {};\n");
  markWarm(cache, [source], Date.now());
  assert.equal(warmMarkCurrent(cache, [source]), true, "marked");
  return { cache, source };
}

describe("the warm mark's trust", () => {
  test("a mark that is a link, writable by others or another user's is not current", () => {
    {
      const { cache, source } = markedCache("link");
      const mark = join(cache, WARM_MARK);
      renameSync(mark, join(cache, "elsewhere"));
      symlinkSync(join(cache, "elsewhere"), mark);
      assert.equal(warmMarkCurrent(cache, [source]), false);
    }
    for (const mode of [0o620, 0o602, 0o666]) {
      const { cache, source } = markedCache(`mode-${mode.toString(8)}`);
      chmodSync(join(cache, WARM_MARK), mode);
      assert.equal(warmMarkCurrent(cache, [source]), false, mode.toString(8));
    }
    for (const mode of [0o770, 0o707, 0o777]) {
      const { cache, source } = markedCache(`dir-${mode.toString(8)}`);
      chmodSync(cache, mode);
      assert.equal(warmMarkCurrent(cache, [source]), false, mode.toString(8));
    }
    if (process.getuid?.() === 0) {
      const { cache, source } = markedCache("owner");
      chownSync(join(cache, WARM_MARK), 65534, 65534);
      assert.equal(warmMarkCurrent(cache, [source]), false);
    }
  });

  test("a malformed, empty, oversized or older mark is not current", () => {
    const { cache, source } = markedCache("malformed");
    const mark = join(cache, WARM_MARK);
    for (
      const text of [
        "",
        "{",
        "null",
        "[]",
        JSON.stringify({ version: 1 }),
        JSON.stringify({ version: 1, files: {} }),
        JSON.stringify({ version: 1, files: [source] }),
        JSON.stringify({ version: 2, files: { [source]: "x" } }),
        JSON.stringify({ version: 1, files: { [source]: 1 } }),
        JSON.stringify({
          version: 1,
          files: { [source]: "x", pad: "y".repeat(2 * 1024 * 1024) },
        }),
      ]
    ) {
      writeFileSync(mark, text, { mode: 0o600 });
      assert.equal(warmMarkCurrent(cache, [source]), false, text.slice(0, 60));
    }
  });
});

describe("the code cache's marks", () => {
  test("a link planted in a mark's place is replaced, never written through", async () => {
    const cache = root.join("links");
    mkdirSync(cache, { mode: 0o700 });
    const victim = root.join("victim.txt");
    writeFileSync(victim, "the user's file");
    for (const name of [WARM_MARK, USED_MARK, STUCK_MARK, PRUNED_MARK]) {
      symlinkSync(victim, join(cache, name));
    }
    markWarm(cache, [victim], Date.now() + 60_000);
    touchCodeCache(cache);
    markWarmUpStuck(cache);
    assert.equal(await prunedRecently(cache), false);
    assert.equal(readFileSync(victim, "utf8"), "the user's file");
    for (const name of [WARM_MARK, USED_MARK, STUCK_MARK, PRUNED_MARK]) {
      const stat = lstatSync(join(cache, name));
      assert.ok(stat.isFile(), name);
      assert.equal(stat.mode & 0o777, 0o600, name);
    }
    // Nothing left beside them.
    assert.deepEqual(
      readdirSync(cache).sort(),
      [WARM_MARK, USED_MARK, STUCK_MARK, PRUNED_MARK].sort(),
    );
  });
});

describe("a planted warm mark and planted code", needsSandbox(), () => {
  test("a worker runs its module's own code, never code planted in its cache beside a current mark", () => {
    const denoDir = root.join("deno");
    mkdirSync(denoDir);
    const module = root.join("planted_worker.ts");
    writeSettled(
      module,
      `import { defineWorker } from ${
        JSON.stringify(new URL("../../worker.ts", import.meta.url).href)
      };
export default defineWorker({ value: () => "own code" });
`,
    );
    const parent = (): { value: string; warmUps: number } => {
      const script = fixture("start/warm_up_parent.ts").pathname;
      const url = pathToFileURL(module).href;
      const out = execFileSync(
        process.execPath,
        scriptArgs(script, url),
        {
          encoding: "utf8",
          env: { ...process.env, NO_COLOR: "1", DENO_DIR: denoDir },
          timeout: 120_000,
        },
      );
      return JSON.parse(out.trim().split("\n").at(-1) ?? "");
    };
    assert.equal(parent().warmUps, 2);
    const caches = join(denoDir, "airlock-code");
    const [key] = readdirSync(caches).filter((name) =>
      /^[0-9a-f]{32}$/.test(name)
    );
    const cache = join(caches, key as string);
    // The module's transpiled code rewritten (its metadata line kept, so
    // the source hash it names still matches the module), and a mark that
    // says nothing changed: no warm-up runs to repair it.
    const emitted = join(cache, "gen", "file", `${module.slice(1)}.js`);
    const metadata = readFileSync(emitted, "utf8").trimEnd().split("\n").at(-1);
    assert.match(metadata ?? "", /^\/\/ denoCacheMetadata=/);
    writeFileSync(
      emitted,
      `export default { handlers: { value: () => "planted code" } };\n${metadata}`,
    );
    const sources = Object.keys(
      (JSON.parse(readFileSync(join(cache, WARM_MARK), "utf8")) as {
        files: Record<string, string>;
      }).files,
    );
    markWarm(cache, sources, Date.now());
    assert.deepEqual(parent(), { value: "own code", warmUps: 0 });
  });
});
