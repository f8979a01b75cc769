/**
 * Lets a worker change the mode of a file it may write where Landlock is
 * the only sandbox backend. There the seccomp filter refuses every
 * path-based chmod, because Landlock does not check metadata calls; but
 * Deno's `node:fs` sets a file's mode by path (`appendFileSync` chmods the
 * file to 0666 after every write), and user code calls `chmod` by path. A
 * chmod refused with EPERM is tried again as `fchmod` on a descriptor
 * opened for writing: Landlock checks that open, so the retry succeeds
 * exactly where the worker may write, and the first error stands
 * everywhere else.
 *
 * Installed before any user code loads: on Deno around `Deno.chmodSync`
 * and `Deno.chmod` (which its `node:fs` calls), always (it loads nothing);
 * on Bun around `node:fs`'s `chmodSync`, `chmod` and `promises.chmod`, only
 * where the parent passed {@linkcode CHMOD_FALLBACK_FLAG} (Landlock alone:
 * loading `node:fs` and its promises costs a Bun start 7 to 9 ms).
 * Confinement does not depend on it: a worker that removes it only loses
 * the retry.
 *
 * @module
 */

import type * as Fs from "node:fs";

/**
 * The flag of a Bun worker's entry (`entry.ts <module URL> --chmod-fallback`)
 * that installs the retry: the parent passes it where Landlock is the only
 * backend.
 */
export const CHMOD_FALLBACK_FLAG = "--chmod-fallback";

type Mode = number | string;
type ChmodSync = (path: string | URL, mode: Mode) => void;
type Chmod = (path: string | URL, mode: Mode) => Promise<void>;

interface DenoChmod {
  chmodSync: ChmodSync;
  chmod: Chmod;
}

/** `node:fs`, loaded the first time a retry needs it. */
function nodeFs(): typeof Fs {
  return (globalThis as unknown as {
    process: { getBuiltinModule(id: "node:fs"): typeof Fs };
  }).process.getBuiltinModule("node:fs");
}

function refusedByOs(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === "EPERM";
}

/**
 * Sets the mode of the regular file at `path` through a descriptor opened
 * for writing; `false` where that cannot be done (not open for writing
 * here, or not a regular file).
 */
function chmodThroughDescriptor(path: string | URL, mode: Mode): boolean {
  const fs = nodeFs();
  try {
    // No stat by path first: a worker may write where it may not read
    // (Deno's flags refuse the stat). O_NONBLOCK keeps a FIFO from blocking
    // the open; what is not a regular file is closed unchanged.
    const { O_WRONLY, O_NONBLOCK, O_NOCTTY } = fs.constants;
    const fd = fs.openSync(path, O_WRONLY | O_NONBLOCK | O_NOCTTY);
    try {
      if (!fs.fstatSync(fd).isFile()) return false;
      fs.fchmodSync(fd, mode);
      return true;
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    return false;
  }
}

/**
 * Wraps a synchronous and a promise chmod of `target` so that a call
 * refused with EPERM is retried through a descriptor opened for writing.
 */
function wrapChmod(
  target: { chmodSync: ChmodSync },
  promises: { chmod: Chmod },
): void {
  const chmodSync = target.chmodSync.bind(target);
  const chmod = promises.chmod.bind(promises);
  target.chmodSync = (path, mode) => {
    try {
      chmodSync(path, mode);
    } catch (error: unknown) {
      if (!refusedByOs(error) || !chmodThroughDescriptor(path, mode)) {
        throw error;
      }
    }
  };
  promises.chmod = async (path, mode) => {
    try {
      await chmod(path, mode);
    } catch (error: unknown) {
      if (!refusedByOs(error) || !chmodThroughDescriptor(path, mode)) {
        throw error;
      }
    }
  };
}

/**
 * Installs the retry: around `Deno.chmodSync` and `Deno.chmod` where
 * `deno` is given, else around `node:fs`'s chmod functions (Bun).
 *
 * @param deno The `Deno` namespace (`globalThis.Deno`), on Deno.
 */
export function installChmodFallback(deno?: DenoChmod): void {
  if (deno !== undefined) {
    wrapChmod(deno, deno);
    return;
  }
  const fs = nodeFs();
  const chmod = fs.chmod.bind(fs);
  wrapChmod(fs, fs.promises);
  (fs as { chmod: unknown }).chmod = (
    path: string | URL,
    mode: Mode,
    callback: (error: Error | null) => void,
  ) =>
    chmod(path, mode, (error) => {
      callback(
        error !== null && refusedByOs(error) &&
          chmodThroughDescriptor(path, mode)
          ? null
          : error,
      );
    });
}
