/**
 * The seccomp filter handed to bubblewrap (`--seccomp FD`) where no
 * Landlock step installs one: written once per filter to a private
 * directory of this process (mode 0700, never where a worker of this
 * process may write), named by its hash, opened as fd 3 for bubblewrap by a
 * shell that execs it.
 *
 * @module
 */

import {
  existsSync,
  join,
  mkdtempSync,
  rmSync,
  tmpdir,
  writeFileSync,
} from "../node_builtins.ts";
import { writableByWorker } from "../launch/executable.ts";
import { sha256Hex } from "../sha256.ts";

let dir: string | undefined;

/**
 * The file holding a seccomp BPF program, written if it is not there yet.
 *
 * @param program The BPF program (from `seccompFilter()`).
 * @param onExit Registers a callback run when this process exits (the
 * directory is removed then).
 * @returns The file's path.
 * @throws {Error} when the directory lies where a worker may write (it
 * could swap the filter), naming it.
 */
export function seccompFile(
  program: Uint8Array,
  onExit: (callback: () => void) => void,
): string {
  if (dir === undefined) {
    const created = mkdtempSync(join(tmpdir(), "airlock-seccomp-"));
    dir = created;
    onExit(() => {
      try {
        rmSync(created, { recursive: true, force: true });
      } catch {
        // Exiting anyway.
      }
    });
  }
  const grant = writableByWorker(dir);
  if (grant !== undefined) {
    throw new Error(
      `the seccomp filter's directory "${dir}" lies inside "${grant}", where a worker may write and could swap the filter; set TMPDIR to a directory no worker is granted`,
    );
  }
  const hash = sha256Hex(program).slice(0, 32);
  const file = join(dir, `${hash}.bpf`);
  // "wx": never through a file or link that is already there.
  if (!existsSync(file)) {
    writeFileSync(file, program, { mode: 0o600, flag: "wx" });
  }
  return file;
}
