/**
 * What the security tests share: whether bubblewrap can confine workers
 * here (a test that needs it is skipped with the reason printed), and the
 * hostile worker fixture.
 *
 * @module
 */

import process from "node:process";
import { findExecutable } from "../../src/runtime/launch/executable.ts";

/** The hostile worker fixture. */
export const HOSTILE: URL = new URL(
  "../fixtures/security/hostile_worker.ts",
  import.meta.url,
);

function refuse(detail: string): never {
  throw new Error(detail);
}

/**
 * Why the OS sandbox tests cannot run here, or `false` when they can. The
 * reason is printed once per file.
 *
 * @param file The test file's name, for the message.
 * @returns The skip reason, or `false`.
 */
export function sandboxSkip(file: string): string | false {
  let reason: string | false = false;
  if (process.platform !== "linux") {
    reason = `the OS sandbox needs Linux, this is ${process.platform}`;
  } else if (
    findExecutable("bwrap", { path: process.env.PATH }, refuse) === undefined
  ) {
    reason =
      'bubblewrap ("bwrap") is not installed (install it, e.g. "apt-get install bubblewrap")';
  }
  if (reason) process.stderr.write(`${file}: skipping: ${reason}\n`);
  return reason;
}
