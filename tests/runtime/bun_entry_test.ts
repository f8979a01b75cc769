// The pre-bundled worker entry of Bun workers (src/runtime/bun_entry.ts):
// built once into the cache, runnable, refused quietly where it cannot be
// built, and what a Bun worker actually runs. Runs under both runners: it
// runs bun itself.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { session } from "../../mod.ts";
import { bunEntryBundle } from "../../src/runtime/bun_entry.ts";
import {
  captureLog,
  checkNoLeaks,
  fixture,
  needsWorkers,
  scratchDir,
} from "../_helpers.ts";

checkNoLeaks();

const root = fileURLToPath(new URL("../../", import.meta.url));
const bun = realpathSync(join(root, "node_modules", ".bin", "bun"));

/** A miniature airlock tree: src/ and workers/entry.ts printing `text`. */
function tree(dir: string, text: string): string {
  mkdirSync(join(dir, "src"), { recursive: true });
  mkdirSync(join(dir, "workers"), { recursive: true });
  writeFileSync(
    join(dir, "src", "say.ts"),
    `export const said: string = ${JSON.stringify(text)};\n`,
  );
  const entry = join(dir, "workers", "entry.ts");
  writeFileSync(
    entry,
    'import { said } from "../src/say.ts";\nconsole.log(said);\n',
  );
  return entry;
}

describe("bunEntryBundle()", () => {
  test("bunEntryBundle() builds one runnable file into the cache and reuses it", () => {
    using dir = scratchDir("bun-entry");
    const entry = tree(dir.join("a"), "from the bundle");
    const env = { XDG_CACHE_HOME: dir.join("cache"), PATH: "/usr/bin:/bin" };
    const bundle = bunEntryBundle(bun, entry, env);
    assert.ok(bundle, "a bundle was built");
    assert.equal(dirname(bundle), dir.join("cache", "airlock", "bun-entry"));
    assert.equal(
      execFileSync(bun, [bundle], { encoding: "utf8" }).trim(),
      "from the bundle",
    );
    // The bundle and its stamp, no partial file left; asked again, the same.
    const name = bundle.split("/").at(-1) as string;
    assert.deepEqual(readdirSync(dirname(bundle)).sort(), [
      name,
      name.replace(/\.js$/, ".stamp"),
    ]);
    assert.match(
      readFileSync(bundle.replace(/\.js$/, ".stamp"), "utf8"),
      /say\.ts\0\d+\0/,
    );
    assert.equal(bunEntryBundle(bun, entry, env), bundle);
    // Other sources, another bundle.
    const other = bunEntryBundle(bun, tree(dir.join("b"), "other"), env);
    assert.ok(other && other !== bundle);
    assert.match(readFileSync(other, "utf8"), /other/);
  });

  test("bunEntryBundle() gives undefined where it cannot build, leaving nothing behind", () => {
    using dir = scratchDir("bun-entry");
    const entry = tree(dir.join("a"), "x");
    assert.equal(bunEntryBundle(bun, entry, { PATH: "/usr/bin" }), undefined);
    const broken = tree(dir.join("broken"), "x");
    writeFileSync(broken, "export const = ;\n");
    const env = { XDG_CACHE_HOME: dir.join("cache") };
    assert.equal(bunEntryBundle(bun, broken, env), undefined);
    const cache = dir.join("cache", "airlock", "bun-entry");
    assert.deepEqual(existsSync(cache) ? readdirSync(cache) : [], []);
  });
});

describe("Bun workers", needsWorkers("bun"), () => {
  test("a Bun worker runs the pre-bundled entry (tests/parent/custom_type_test.ts shows custom types still cross)", async () => {
    await using s = await session(fixture("basic_worker.ts"), {
      ...captureLog(),
      runtime: "bun",
    });
    const cmdline = readFileSync(`/proc/${s.pid}/cmdline`, "utf8").split("\0");
    assert.ok(
      cmdline.some((arg) => /\/bun-entry\/entry-[0-9a-f]+\.js$/.test(arg)),
      `worker runs ${cmdline.join(" ")}`,
    );
  });
});
