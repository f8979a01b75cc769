// The pre-bundled worker entry of Bun workers (src/runtime/bun_entry.ts):
// built once per process into a private directory, runnable, never given
// again once changed, refused quietly where it cannot be built, and what a
// Bun worker actually runs. Runs under both runners: it runs bun itself.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  mkdirSync,
  readFileSync,
  realpathSync,
  statSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { session } from "../../mod.ts";
import {
  builtBunEntryBundle,
  bunEntryBundle,
} from "../../src/runtime/bun_entry.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";

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

/** Removes the private directory when this test process exits. */
const onExit = (callback: () => void): void => {
  process.on("exit", callback);
};

describe("bunEntryBundle()", () => {
  test("bunEntryBundle() builds one runnable file into a private directory of this process, in the background, and reuses it", async () => {
    using dir = scratchDir("bun-entry");
    const entry = tree(dir.join("a"), "from the bundle");
    const env = { PATH: "/usr/bin:/bin" };
    // The first call starts the build and does not wait for it: that worker
    // runs the entry itself.
    assert.equal(bunEntryBundle(bun, entry, env, onExit), undefined);
    const bundle = await builtBunEntryBundle(bun, entry, env, onExit);
    assert.ok(bundle, "a bundle was built");
    const { file } = bundle;
    // Never in a cache shared between processes: a new directory of this
    // process, 0700, under the temporary directory.
    assert.ok(dirname(file).startsWith(join(tmpdir(), "airlock-")));
    assert.equal(statSync(dirname(dirname(file))).mode & 0o777, 0o700);
    assert.equal(
      bundle.sha256,
      createHash("sha256").update(readFileSync(file)).digest("hex"),
    );
    assert.equal(
      execFileSync(bun, [file], { encoding: "utf8" }).trim(),
      "from the bundle",
    );
    assert.deepEqual(bunEntryBundle(bun, entry, env, onExit), bundle);
    // Other sources, another bundle.
    const other = await builtBunEntryBundle(
      bun,
      tree(dir.join("b"), "other"),
      env,
      onExit,
    );
    assert.ok(other && other.file !== file);
    assert.match(readFileSync(other.file, "utf8"), /other/);
  });

  test("bunEntryBundle() never gives a bundle that changed after it was built", async () => {
    using dir = scratchDir("bun-entry");
    const entry = tree(dir.join("a"), "built");
    const env = { PATH: "/usr/bin:/bin" };
    const bundle = await builtBunEntryBundle(bun, entry, env, onExit);
    assert.ok(bundle, "a bundle was built");
    const source = readFileSync(bundle.file, "utf8");
    writeFileSync(bundle.file, `console.log("planted");\n${source}`);
    assert.equal(bunEntryBundle(bun, entry, env, onExit), undefined);
    // Put back as it was, still refused: a bundle once changed is never
    // trusted again in this process.
    writeFileSync(bundle.file, source);
    assert.equal(bunEntryBundle(bun, entry, env, onExit), undefined);
  });

  test("bunEntryBundle() refuses a bundle rewritten to the same size with its mtime put back", async () => {
    using dir = scratchDir("bun-entry");
    const entry = tree(dir.join("a"), "built");
    const env = { PATH: "/usr/bin:/bin" };
    const bundle = await builtBunEntryBundle(bun, entry, env, onExit);
    assert.ok(bundle, "a bundle was built");
    assert.deepEqual(bunEntryBundle(bun, entry, env, onExit), bundle);
    const before = statSync(bundle.file);
    const source = readFileSync(bundle.file, "utf8");
    writeFileSync(bundle.file, source.replace("built", "BUILT"));
    utimesSync(bundle.file, before.atime, before.mtime);
    assert.equal(statSync(bundle.file).size, before.size);
    assert.equal(bunEntryBundle(bun, entry, env, onExit), undefined);
  });

  test("bunEntryBundle() gives undefined where it cannot build", async () => {
    using dir = scratchDir("bun-entry");
    const broken = tree(dir.join("broken"), "x");
    writeFileSync(broken, "export const = ;\n");
    const bundle = await builtBunEntryBundle(bun, broken, {}, onExit);
    assert.equal(bundle, undefined);
    assert.equal(bunEntryBundle(bun, broken, {}, onExit), undefined);
    // Not airlock's entry: not bundled.
    const other = join(dir.join("a"), "main.ts");
    mkdirSync(dirname(other), { recursive: true });
    writeFileSync(other, "console.log(1);\n");
    assert.equal(bunEntryBundle(bun, other, {}, onExit), undefined);
  });
});

describe("Bun workers", needsWorkers("bun"), () => {
  test("a Bun worker runs the pre-bundled entry once it is built (tests/parent/custom_type_test.ts shows custom types still cross)", async () => {
    const cmdlineOf = async () => {
      await using s = await session(fixture("basic_worker.ts"), {
        ...captureLog(),
        runtime: "bun",
      });
      return readFileSync(`/proc/${s.pid}/cmdline`, "utf8").split("\0");
    };
    const bundled = (cmdline: string[]) =>
      cmdline.some((arg) => /\/bun-entry\/entry-[0-9a-f]+\.js$/.test(arg));
    const first = await cmdlineOf();
    if (!bundled(first)) {
      // The first Bun worker of a process starts the build and runs the
      // entry itself: `bun --no-env-file <workers/entry.ts> <module>`.
      const [binary = "", , entry = ""] = first;
      assert.match(entry, /\/workers\/entry\.[jt]s$/, first.join(" "));
      await builtBunEntryBundle(binary, entry, process.env, onExit);
    }
    const later = await cmdlineOf();
    assert.ok(bundled(later), `worker runs ${later.join(" ")}`);
  });
});
