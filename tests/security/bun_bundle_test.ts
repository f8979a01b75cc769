// The Bun entry bundle (src/runtime/bun_entry.ts) against another process
// of this user (a worker of another airlock program granted write on the
// temporary directory, or on the project): the parent trusts only the bytes
// the build printed to it, and no bunfig.toml decides what airlock's worker
// code becomes. Runs under both runners: it runs bun itself.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
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
import { checkNoLeaks, scratchDir } from "../_helpers.ts";

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
