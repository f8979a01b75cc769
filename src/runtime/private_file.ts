/**
 * Reads a small record the parent keeps for itself (the code cache's warm
 * mark, the kept probes) from a place where other processes of the same
 * user could have replaced it: a check by path and then a read by path is
 * a race (a file swapped for a FIFO, which blocks the read, or for a link
 * to `/dev/zero` or a huge file, which fills the parent's memory). So the
 * file is opened once, without following a link and without blocking, and
 * that descriptor is checked (a regular file, this user's, writable by no
 * one else) and read, never more than its bound. Private to src/runtime.
 *
 * @module
 */

import type * as Fs from "node:fs";

/**
 * `node:fs`, loaded when first used (as node_builtins.ts loads it; that
 * module is a source of the checked-in Bun bundle, this one is not).
 */
function fs(): typeof Fs {
  const process = (globalThis as unknown as {
    process: { getBuiltinModule(id: string): unknown };
  }).process;
  return process.getBuiltinModule("node:fs") as typeof Fs;
}

/**
 * The text of `path` when it is a regular file (no link), owned by `uid`,
 * writable by no one else and at most `maxBytes` long; `undefined`
 * otherwise (or when it cannot be read). Never blocks on a FIFO or device
 * and never reads more than `maxBytes + 1` bytes.
 *
 * @param path An absolute path.
 * @param maxBytes The most bytes the record may have.
 * @param uid The user who must own it.
 * @returns The text, or `undefined`.
 *
 * @example
 * ```ts
 * import { readPrivateFile } from "./private_file.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(readPrivateFile("/dev/zero", 16, 0), undefined);
 * ```
 */
export function readPrivateFile(
  path: string,
  maxBytes: number,
  uid: number,
): string | undefined {
  const bytes = readPrivateBytes(path, maxBytes, uid);
  return bytes === undefined ? undefined : new TextDecoder().decode(bytes);
}

/**
 * The bytes of `path`, on the terms of {@linkcode readPrivateFile}.
 *
 * @param path An absolute path.
 * @param maxBytes The most bytes the file may have.
 * @param uid The user who must own it.
 * @returns The bytes, or `undefined`.
 */
export function readPrivateBytes(
  path: string,
  maxBytes: number,
  uid: number,
): Uint8Array | undefined {
  const { closeSync, constants, fstatSync, openSync, readSync } = fs();
  let fd: number;
  try {
    const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK, O_NOCTTY } = constants;
    fd = openSync(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  } catch {
    return undefined;
  }
  try {
    const stat = fstatSync(fd);
    if (
      !stat.isFile() || stat.uid !== uid || (stat.mode & 0o022) !== 0 ||
      stat.size > maxBytes
    ) return undefined;
    // It may grow after the fstat: read one byte past the bound, at most.
    const buffer = new Uint8Array(Math.min(stat.size, maxBytes) + 1);
    let length = 0;
    while (length < buffer.length) {
      const got = readSync(fd, buffer, length, buffer.length - length, null);
      if (got === 0) break;
      length += got;
    }
    // Longer than at the fstat: it changed while read.
    if (length > stat.size) return undefined;
    return buffer.subarray(0, length);
  } catch {
    return undefined;
  } finally {
    closeSync(fd);
  }
}
