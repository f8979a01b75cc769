// The pre-bundled worker entry of Bun workers (src/runtime/bun_entry.ts):
// checked in as what its sources build to with the pinned Bun, given at
// once where the sources match; elsewhere built once per process into a
// private directory, runnable, never given again once changed, refused
// quietly where it cannot be built; and what a Bun worker actually runs.
// Runs under both runners: it runs bun itself.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { Buffer } from "node:buffer";
import {
  copyFileSync,
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
  BUILD_BUN_ENTRY_ENV,
  builtBunEntryBundle,
  bunEntryBundle,
} from "../../src/runtime/bun_entry.ts";
import { BUN_ENTRY_BUNDLE } from "../../src/runtime/_bun_entry_bundle.ts";
import {
  buildBunEntry,
  BUN_ENTRY_BUNDLE_FILE,
  BUN_ENTRY_BUNDLE_MODULE,
  bunEntryBundleModule,
} from "../../scripts/build_bun_entry.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { RUNTIME } from "../_helpers/runtime.ts";

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

/** A copy of airlock's sources the checked-in bundle is built from, and the bundle. */
function copyOfAirlock(dir: string): string {
  for (const path of [...BUN_ENTRY_BUNDLE.sources.map(([path]) => path)]) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    copyFileSync(join(root, path), join(dir, path));
  }
  copyFileSync(
    join(root, BUN_ENTRY_BUNDLE.file),
    join(dir, BUN_ENTRY_BUNDLE.file),
  );
  return join(dir, "workers", "entry.ts");
}

describe("the checked-in Bun entry bundle", () => {
  test("workers/entry_bundle.js and its hashes are what scripts/build_bun_entry.ts builds with the pinned Bun", () => {
    const build = buildBunEntry(root);
    const stale =
      "stale: rebuild with node_modules/.bin/deno run -A scripts/build_bun_entry.ts";
    assert.equal(build.bun, BUN_ENTRY_BUNDLE.bun, stale);
    assert.equal(
      readFileSync(join(root, BUN_ENTRY_BUNDLE_MODULE), "utf8"),
      bunEntryBundleModule(root, build),
      stale,
    );
    assert.ok(
      Buffer.from(build.bundle).equals(
        readFileSync(join(root, BUN_ENTRY_BUNDLE_FILE)),
      ),
      stale,
    );
    // Reproducible: no path of this machine in it.
    assert.doesNotMatch(
      Buffer.from(build.bundle).toString("utf8"),
      new RegExp(root),
    );
  });

  test("bunEntryBundle() gives the checked-in bundle without a build where the sources match (at once on a Bun parent)", async () => {
    using dir = scratchDir("bun-entry-copy");
    const entry = copyOfAirlock(dir.join("airlock"));
    const expected = {
      file: join(dir.path, "airlock", BUN_ENTRY_BUNDLE.file),
      sha256: BUN_ENTRY_BUNDLE.sha256,
    };
    const first = bunEntryBundle(bun, entry, {}, onExit);
    // A Deno parent checks it in the background (WebCrypto, a file a turn).
    assert.deepEqual(first, RUNTIME === "bun" ? expected : undefined);
    assert.deepEqual(
      await builtBunEntryBundle(bun, entry, {}, onExit),
      expected,
    );
    assert.deepEqual(bunEntryBundle(bun, entry, {}, onExit), expected);
    // Not with the variable that asks for a build: that call starts one.
    assert.equal(
      bunEntryBundle(bun, entry, { [BUILD_BUN_ENTRY_ENV]: "1" }, onExit),
      undefined,
    );
  });

  test("an edited copy of airlock's sources gets a bundle built from them, not the checked-in one", async () => {
    using dir = scratchDir("bun-entry-edited");
    const entry = copyOfAirlock(dir.join("airlock"));
    const edited = join(dir.path, "airlock", "src", "worker", "main.ts");
    writeFileSync(
      edited,
      `${
        readFileSync(edited, "utf8")
      }\n(globalThis as { editedCopy?: boolean }).editedCopy = true;\n`,
    );
    assert.equal(bunEntryBundle(bun, entry, process.env, onExit), undefined);
    const built = await builtBunEntryBundle(bun, entry, process.env, onExit);
    assert.ok(built, "built");
    assert.ok(built.file.startsWith(join(tmpdir(), "airlock-")), built.file);
    assert.match(readFileSync(built.file, "utf8"), /editedCopy/);
  });
});

describe("Bun workers", needsWorkers("bun"), () => {
  test("a Bun worker runs the checked-in pre-bundled entry, on a Bun parent the first of the process included (tests/parent/custom_type_test.ts shows custom types still cross)", async () => {
    if (RUNTIME === "deno") {
      // A Deno parent checks the bundle in the background: its Bun workers
      // run workers/entry.ts itself until then.
      await builtBunEntryBundle(
        bun,
        join(root, "workers", "entry.ts"),
        process.env,
        onExit,
      );
    }
    await using s = await session(fixture("basic_worker.ts"), {
      ...captureLog(),
      runtime: "bun",
    });
    const cmdline = readFileSync(`/proc/${s.pid}/cmdline`, "utf8").split("\0");
    const at = cmdline.findIndex((arg) =>
      /\/workers\/bun_loader\.ts$/.test(arg)
    );
    assert.ok(at > 0, cmdline.join(" "));
    assert.deepEqual(cmdline.slice(at + 1, at + 3), [
      join(root, BUN_ENTRY_BUNDLE.file),
      BUN_ENTRY_BUNDLE.sha256,
    ]);
  });

  test("a Bun worker runs the bundle this process built once it is built, where the checked-in one is not used", async () => {
    const env = process.env[BUILD_BUN_ENTRY_ENV];
    process.env[BUILD_BUN_ENTRY_ENV] = "1";
    try {
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
        const entry = first.find((arg) => /\/workers\/entry\.[jt]s$/.test(arg));
        assert.ok(entry, first.join(" "));
        await builtBunEntryBundle(bun, entry, process.env, onExit);
      }
      const later = await cmdlineOf();
      assert.ok(bundled(later), `worker runs ${later.join(" ")}`);
    } finally {
      if (env === undefined) delete process.env[BUILD_BUN_ENTRY_ENV];
      else process.env[BUILD_BUN_ENTRY_ENV] = env;
    }
  });
});
