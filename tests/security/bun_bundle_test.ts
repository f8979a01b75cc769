// The Bun entry bundle (src/runtime/bun_entry.ts) against another process
// of this user (a worker of another airlock program granted write on the
// temporary directory, or on the project): a checked-in bundle whose bytes
// are not what its recorded hash says is never given (nor after a change
// within the process); the parent trusts only the bytes the build printed
// to it, no bunfig.toml decides what airlock's worker code
// becomes, and a bundle changed through a shared mapping (which leaves the
// file's times alone, so its stamp still matches) stops being given within
// a second instead of failing every later Bun start at the loader's check.
// Runs under both runners: it runs bun itself.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  builtBunEntryBundle,
  bunEntryBundle,
} from "../../src/runtime/bun_entry.ts";
import { BUN_ENTRY_BUNDLE } from "../../src/runtime/_bun_entry_bundle.ts";
import { scratchDir } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const root = fileURLToPath(new URL("../../", import.meta.url));
const bun = realpathSync(join(root, "node_modules", ".bin", "bun"));
const onExit = (callback: () => void): void => {
  process.on("exit", callback);
};
const sha256 = (bytes: Uint8Array | string) =>
  createHash("sha256").update(bytes).digest("hex");

/** A miniature airlock tree whose workers/entry.ts runs `code`. */
function tree(dir: string, code: string): string {
  const entry = join(dir, "workers", "entry.ts");
  mkdirSync(dirname(entry), { recursive: true });
  writeFileSync(entry, code);
  return entry;
}

/** A copy of airlock's sources and checked-in bundle; its entry. */
function copyOfAirlock(dir: string): string {
  for (const [path] of BUN_ENTRY_BUNDLE.sources) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    copyFileSync(join(root, path), join(dir, path));
  }
  copyFileSync(
    join(root, BUN_ENTRY_BUNDLE.file),
    join(dir, BUN_ENTRY_BUNDLE.file),
  );
  return join(dir, "workers", "entry.ts");
}

test(
  "a checked-in Bun bundle that is not what its recorded hash says is never given, nor once it changed",
  async () => {
    using dir = scratchDir("bun-bundle-checked-in");
    // Planted before the process looked: refused; workers get a build.
    const planted = copyOfAirlock(dir.join("planted"));
    const plantedFile = dir.join("planted", BUN_ENTRY_BUNDLE.file);
    writeFileSync(
      plantedFile,
      `globalThis.__planted = 1;\n${readFileSync(plantedFile, "utf8")}`,
    );
    const built = await builtBunEntryBundle(bun, planted, process.env, onExit);
    assert.ok(built, "built");
    // The process's own build (of the same sources: the same bytes), in its
    // private directory; never the planted file.
    assert.notEqual(built.file, plantedFile);
    assert.doesNotMatch(readFileSync(built.file, "utf8"), /__planted/);
    // Given, then changed: never given again in this process.
    const later = copyOfAirlock(dir.join("later"));
    const laterFile = dir.join("later", BUN_ENTRY_BUNDLE.file);
    assert.equal(
      (await builtBunEntryBundle(bun, later, process.env, onExit))?.file,
      laterFile,
    );
    const original = readFileSync(laterFile, "utf8");
    writeFileSync(laterFile, `globalThis.__planted = 1;\n${original}`);
    assert.notEqual(
      bunEntryBundle(bun, later, process.env, onExit)?.file,
      laterFile,
    );
    writeFileSync(laterFile, original);
    assert.notEqual(
      (await builtBunEntryBundle(bun, later, process.env, onExit))?.file,
      laterFile,
    );
  },
);

test(
  "the Bun bundle's hash is of the bytes the build printed: a file rewritten while the parent was busy is never trusted",
  async () => {
    using dir = scratchDir("bun-bundle-race");
    // A first build shows where this process's bundles go.
    const first = tree(dir.join("first"), 'console.log("first");\n');
    bunEntryBundle(bun, first, process.env, onExit);
    const known = await builtBunEntryBundle(bun, first, process.env, onExit);
    assert.ok(known, "the first bundle was built");
    const bundles = dirname(known.file);
    const evil = 'console.log("EVIL BUNDLE RAN");\n';
    // The build of another entry starts; this process then stays busy (as a
    // parent does), while an attacker rewrites every new file in the
    // directory the moment it has bytes.
    const target = tree(dir.join("target"), 'console.log("target");\n');
    assert.equal(bunEntryBundle(bun, target, process.env, onExit), undefined);
    const seen = new Set(readdirSync(bundles));
    let rewritten = 0;
    const end = Date.now() + 3_000;
    while (Date.now() < end && rewritten === 0) {
      for (const name of readdirSync(bundles)) {
        if (seen.has(name)) continue;
        const path = join(bundles, name);
        try {
          if (statSync(path).size > 0) {
            writeFileSync(path, evil);
            seen.add(name);
            rewritten++;
          }
        } catch {
          // Gone or not readable meanwhile.
        }
      }
    }
    const built = await builtBunEntryBundle(bun, target, process.env, onExit);
    assert.ok(built, "the target bundle was built");
    assert.notEqual(built.sha256, sha256(evil), "the attacker's bytes trusted");
    assert.match(readFileSync(built.file, "utf8"), /"target"/);
    // Written by the parent, for the parent: 0600.
    assert.equal(statSync(built.file).mode & 0o777, 0o600);
  },
);

test(
  "the Bun bundle ignores a bunfig.toml in the parent's working directory (its [define] never reaches airlock's worker code)",
  async () => {
    using dir = scratchDir("bun-bundle-bunfig");
    const planted = dir.join("project");
    mkdirSync(planted);
    writeFileSync(
      join(planted, "bunfig.toml"),
      '[define]\nPLANTED_GUARD = "\\"planted\\""\n',
    );
    const entry = tree(
      dir.join("tree"),
      'declare const PLANTED_GUARD: string;\nconsole.log(typeof PLANTED_GUARD === "undefined" ? "clean" : PLANTED_GUARD);\n',
    );
    const cwd = process.cwd();
    process.chdir(planted);
    try {
      bunEntryBundle(bun, entry, process.env, onExit);
      const built = await builtBunEntryBundle(bun, entry, process.env, onExit);
      assert.ok(built, "built");
      const code = readFileSync(built.file, "utf8");
      assert.match(code, /PLANTED_GUARD/, code);
      assert.doesNotMatch(code, /"planted"/, code);
    } finally {
      process.chdir(cwd);
    }
  },
);

const MAPPER = `
import mmap, sys
f = open(sys.argv[1], "r+b")
m = mmap.mmap(f.fileno(), 0)
m[0:1] = m[0:1]
print("mapped", flush=True)
sys.stdin.readline()
m[0:2] = b"//"
m[2:20] = b" tampered in place"
print("poked", flush=True)
sys.stdin.readline()
`;

test(
  "a Bun bundle changed through a shared mapping (its times unchanged) stops being given within a second",
  needs("python3"),
  async () => {
    using dir = scratchDir("bun-bundle-mmap");
    const entry = tree(
      dir.join("tree"),
      'console.log("a bundle long enough to poke");\n',
    );
    bunEntryBundle(bun, entry, process.env, onExit);
    const built = await builtBunEntryBundle(bun, entry, process.env, onExit);
    assert.ok(built, "built");
    const child = spawn("python3", ["-c", MAPPER, built.file], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (data: Uint8Array) => {
      out += new TextDecoder().decode(data);
    });
    const exited = new Promise((resolve) => child.on("exit", resolve));
    try {
      await until(() => out.includes("mapped"), 20_000, "the mapping");
      // Past a clock tick after the mapping's one time update, the parent's
      // hash of the (still genuine) bytes keeps the stamp.
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      assert.deepEqual(bunEntryBundle(bun, entry, process.env, onExit), built);
      child.stdin.write("\n");
      await until(() => out.includes("poked"), 20_000, "the change");
      // The stamp still matches; within a second the bytes are hashed again.
      await until(
        () => bunEntryBundle(bun, entry, process.env, onExit) === undefined,
        5_000,
        "the changed bundle refused",
      );
    } finally {
      child.stdin.end();
      child.kill("SIGKILL");
      await exited;
    }
  },
);
