// The Bun entry bundle's stamp check (src/runtime/bun_entry.ts) against a
// file changed through a shared mapping made writable before the parent's
// hash: such stores leave the file's times alone, so the stamp still
// matches. The parent hashes the bytes again at least once a second, so the
// changed bundle stops being given (workers run workers/entry.ts) instead of
// every later Bun start failing at the loader's check for the life of the
// process.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, realpathSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  builtBunEntryBundle,
  bunEntryBundle,
} from "../../src/runtime/bun_entry.ts";
import { checkNoLeaks, needs, scratchDir, until } from "../_helpers.ts";

checkNoLeaks();

const root = fileURLToPath(new URL("../../", import.meta.url));
const bun = realpathSync(join(root, "node_modules", ".bin", "bun"));
const onExit = (callback: () => void): void => {
  process.on("exit", callback);
};

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
    const entry = join(dir.join("tree"), "workers", "entry.ts");
    mkdirSync(dirname(entry), { recursive: true });
    writeFileSync(entry, 'console.log("a bundle long enough to poke");\n');
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
