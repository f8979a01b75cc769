// Attack class: the records the parent keeps for itself on disk (the code
// cache's warm mark, the probes kept per machine), read where another
// process of the same user may write (a worker of another program granted
// write on DENO_DIR or ~/.cache). Both were checked by path (lstat: a
// regular file, this user's, 0600) and then read by path (readFileSync),
// which follows whatever is there by then: a mark swapped for a FIFO after
// the check held the parent in a read that never returned (its event loop
// with it), a link to /dev/zero or a huge file would fill its memory, and
// the kept probes had no size bound at all; the warm-up's stuck mark was
// read by path with no check at all (a FIFO there held the start). Fixed:
// private_file.ts opens the record once (O_NOFOLLOW | O_NONBLOCK), checks
// that descriptor and reads at most its bound.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath, pathToFileURL } from "node:url";
import { fixture, scratchDir, writeSettled } from "../_helpers/files.ts";
import { scriptArgs } from "../_helpers/runtime.ts";
import { needs } from "../_helpers/tools.ts";
import {
  markWarm,
  WARM_MARK,
  warmMarkCurrent,
} from "../../src/runtime/launch/warm_mark.ts";
import { readPrivateFile } from "../../src/runtime/private_file.ts";
import { STUCK_MARK } from "../../src/runtime/launch/code_cache.ts";

const root = scratchDir("parent-records");
after(() => root[Symbol.dispose]());

/** Runs a fixture script with this runtime; returns its last line. */
function runFixture(
  script: string,
  args: string[],
  env: Record<string, string> = {},
): string {
  const path = fixture(script).pathname;
  const out = execFileSync(
    process.execPath,
    scriptArgs(path, ...args),
    {
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1", ...env },
      timeout: 90_000,
    },
  );
  return out.trim().split("\n").at(-1) ?? "";
}

describe("the parent's own records", () => {
  test("readPrivateFile() reads no link, FIFO, device, oversized or others' file", () => {
    const uid = process.getuid?.() ?? 0;
    const file = root.join("record");
    writeFileSync(file, "kept", { mode: 0o600 });
    assert.equal(readPrivateFile(file, 16, uid), "kept");
    assert.equal(readPrivateFile(file, 3, uid), undefined, "past its bound");
    assert.equal(readPrivateFile(file, 16, uid + 1), undefined, "owner");
    const fifo = root.join("fifo");
    execFileSync("mkfifo", ["-m", "0600", fifo]);
    assert.equal(readPrivateFile(fifo, 16, uid), undefined, "a FIFO");
    assert.equal(readPrivateFile("/dev/zero", 16, uid), undefined);
    execFileSync("ln", ["-s", file, root.join("link")]);
    assert.equal(readPrivateFile(root.join("link"), 16, uid), undefined);
    writeFileSync(root.join("open"), "kept");
    chmodSync(root.join("open"), 0o622);
    assert.equal(readPrivateFile(root.join("open"), 16, uid), undefined);
  });

  test("a warm mark swapped for a FIFO between the check and the read never holds the parent", async () => {
    const cache = root.join("cache");
    mkdirSync(cache, { mode: 0o700 });
    const source = root.join("source.ts");
    writeSettled(source, "export {};\n");
    markWarm(cache, [source], Date.now());
    assert.equal(warmMarkCurrent(cache, [source]), true);
    // A valid mark and a FIFO no one writes, put in the mark's place in
    // turn by another process while this one asks.
    const file = join(cache, "mark-file");
    copyFileSync(join(cache, WARM_MARK), file);
    const fifo = join(cache, "mark-fifo");
    execFileSync("mkfifo", ["-m", "0600", fifo]);
    const script = fixture("security/warm_mark_swap.ts").pathname;
    const swapper = spawn(
      process.execPath,
      scriptArgs(script, "swap", cache, file, fifo, "60"),
      { stdio: "ignore" },
    );
    const ended = new Promise<void>((resolve) =>
      swapper.once("exit", () => resolve())
    );
    try {
      // Each ask finds a mark, the FIFO, or nothing (between two renames);
      // a read that followed the mark into the FIFO would block until the
      // fixture's timeout kills it, and fail this test.
      const { current } = JSON.parse(
        runFixture("security/warm_mark_swap.ts", [
          "read",
          cache,
          source,
          "3000",
        ]),
      ) as { current: number };
      assert.ok(current >= 0 && current <= 3000);
    } finally {
      swapper.kill("SIGKILL");
      await ended;
    }
  });

  test("a FIFO in the place of the code cache's stuck mark never holds a start", () => {
    const cache = root.join("stuck");
    mkdirSync(cache, { mode: 0o700 });
    const mark = join(cache, STUCK_MARK);
    writeFileSync(mark, String(Date.now()), { mode: 0o600 });
    const ask = () =>
      JSON.parse(runFixture("security/warm_mark_swap.ts", ["stuck", cache]));
    assert.deepEqual(ask(), { stuck: true });
    // A FIFO no one writes: read by path, the ask never returned (the
    // fixture's timeout kills it and fails this test).
    rmSync(mark);
    execFileSync("mkfifo", ["-m", "0600", mark]);
    assert.deepEqual(ask(), { stuck: false });
  });

  test("a FIFO in the place of the per-process bun bundle never holds the parent", () => {
    const bun = realpathSync(
      fileURLToPath(new URL("../../node_modules/.bin/bun", import.meta.url)),
    );
    // Before, the check read it by path: the ask never returned (the
    // fixture's timeout kills it and fails this test).
    assert.deepEqual(
      JSON.parse(runFixture("security/bundle_fifo.ts", [bun])),
      { built: true, after: false },
    );
  });

  test(
    "an oversized file of kept probes is not read",
    needs("landlock"),
    () => {
      const home = root.join("probes");
      mkdirSync(home);
      const module = pathToFileURL(root.join("w.ts")).href;
      writeFileSync(root.join("w.ts"), "export default {};\n");
      const ask = () =>
        JSON.parse(
          runFixture("sandbox/prefetch_parent.ts", [module], {
            XDG_CACHE_HOME: home,
          }),
        ) as { before: string; after: string };
      assert.equal(ask().after, "answered");
      const kept = join(home, "airlock", "probes-v1.json");
      assert.ok(existsSync(kept));
      assert.equal(ask().before, "answered", "kept and read");
      // The same answers, padded past the bound (1 MiB; 32 answers take
      // ~10 KB): never read, so the probes run again.
      const entries = JSON.parse(readFileSync(kept, "utf8")) as Record<
        string,
        unknown
      >;
      writeFileSync(
        kept,
        JSON.stringify({ ...entries, pad: "x".repeat(2 * 1024 * 1024) }),
        { mode: 0o600 },
      );
      assert.equal(ask().before, "probe needed");
    },
  );
});
