// The real `lmdb` client in a pool of sandboxed workers that share one
// environment (issue 23 item 5). LMDB's reader locks are keyed by pid
// (fcntl locks at byte offset = the reader's pid in the lock file), so the
// workers of a pool must see distinct pids: in 0.2 every worker was pid 2 in
// its own pid namespace and the second worker's read transactions failed
// ("Cannot read properties of null (reading 'address')").
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { realpathSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { pool } from "../../mod.ts";
import type lmdb from "../fixtures/lmdb_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("lmdb_worker.ts");

/**
 * What the worker needs besides its store: the native addon's package
 * (lmdb lists it to pick the prebuilt binary), `ldd` (detect-libc reads it
 * to tell glibc from musl) and FFI to load the addon.
 */
function permissions(dir: string) {
  const addon = realpathSync(
    fileURLToPath(new URL("../../node_modules/@lmdb", import.meta.url)),
  );
  return { read: [dir, addon, "/usr/bin/ldd"], write: [dir], ffi: true };
}

// Distinct pids need Landlock's signal scoping (ABI 6) under bubblewrap, and
// Landlock alone keeps host pids: either way, Landlock ABI 6.
describe("pool() on one lmdb environment", needs("landlock"), () => {
  test("pool() of 3 sandboxed workers runs 300 concurrent lmdb reads and writes, all correct", async () => {
    using dir = scratchDir("lmdb");
    const log = captureLog();
    await using p = pool<typeof lmdb>(worker, {
      ...log,
      sandbox: "os",
      max: 3,
      prewarm: 3,
      permissions: permissions(dir.path),
      setup: [["open", dir.path]],
    });
    await until(() => p.stats().workers === 3, 60_000, "three workers");
    for (let i = 0; i < 50; i++) await p.put(`before:${i}`, i);
    const reads: Promise<void>[] = [];
    const writes: Promise<boolean>[] = [];
    const readers = new Set<number>();
    for (let i = 0; i < 300; i++) {
      if (i % 2 === 0) {
        const key = i % 100;
        reads.push(
          p.get(`before:${key % 50}`).then(({ value, worker }) => {
            readers.add(worker);
            assert.equal(value, key % 50, `before:${key % 50}`);
          }),
        );
      } else {
        writes.push(p.put(`during:${i}`, i));
      }
    }
    const settled = await Promise.allSettled([...reads, ...writes]);
    const failed = settled.filter((r) => r.status === "rejected");
    assert.deepEqual(
      failed.map((r) => String((r as PromiseRejectedResult).reason)),
      [],
      `stderr: ${log.lines.join("\n")}`,
    );
    assert.ok(readers.size >= 2, `reads ran on ${readers.size} worker(s)`);
    for (let i = 1; i < 300; i += 2) {
      assert.equal((await p.get(`during:${i}`)).value, i, `during:${i}`);
    }
    assert.equal(p.stats().crashed, 0, `stderr: ${log.lines.join("\n")}`);
  });
});
