/**
 * Sets `DENO_DIR` for the test process and what it spawns; every helper
 * module imports it, so a test file that imports any helper gets it.
 *
 * @module
 */

import { lstatSync, mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

/**
 * The Deno cache directory of the test processes (and what they spawn): a
 * directory of this user's under the temporary directory, kept from one run
 * to the next, so that sandboxed Deno workers' private code caches
 * (`<DENO_DIR>/airlock-code`) never fill the user's own cache. Another
 * user's directory at that path is never used (a fresh one instead).
 */
function testDenoDir(): string {
  const uid = process.getuid?.() ?? 0;
  const root = join(tmpdir(), `airlock-test-cache-${uid}`);
  try {
    mkdirSync(root, { mode: 0o700 });
  } catch {
    // There already.
  }
  try {
    const stat = lstatSync(root);
    if (stat.isDirectory() && stat.uid === uid && (stat.mode & 0o022) === 0) {
      return join(root, "deno");
    }
  } catch {
    // Not usable: a fresh one below.
  }
  return join(mkdtempSync(join(tmpdir(), "airlock-test-cache-")), "deno");
}
process.env.DENO_DIR = testDenoDir();
