/**
 * The one executable lookup of a launch: runtime binaries, bubblewrap,
 * `setpriv` and the program of a `command`. A candidate counts when it is a
 * file with an execute bit; the lookup needs only read access on Deno (no
 * `--allow-sys`, which `accessSync` would need), and a lookup it cannot make
 * is an error, never "not found". Found binaries are resolved to their real
 * path (`node_modules/.bin/bun` is a symlink) and never taken from a place a
 * worker of this process was granted write access to. Private to
 * src/runtime.
 *
 * @module
 */

import {
  closeSync,
  delimiter,
  dirname,
  isAbsolute,
  join,
  openSync,
  readSync,
  realpathSync,
  resolve,
  statSync,
} from "../node_builtins.ts";

/** Error codes that mean "no such file here", as opposed to "cannot look". */
const ABSENT = new Set(["ENOENT", "ENOTDIR", "ENAMETOOLONG", "ELOOP"]);

/** Called when a lookup cannot be made (the parent may not read a candidate): throws. */
export type LookupDenied = (detail: string, cause: unknown) => never;

/** Paths some worker of this process was granted write access to. */
const workerWritable = new Set<string>();

/**
 * Records paths a worker is granted write access to: executables found
 * under them are refused from now on (a worker could have planted them).
 *
 * @param paths Absolute paths.
 */
export function recordWorkerWritable(paths: readonly string[]): void {
  for (const path of paths) {
    workerWritable.add(path);
    try {
      workerWritable.add(realpathSync(path));
    } catch {
      // Not there yet: the path as given is recorded.
    }
  }
}

/**
 * The worker-writable path that covers `path`, if any.
 *
 * @param path An absolute path.
 * @returns The covering grant, or `undefined`.
 */
export function writableByWorker(path: string): string | undefined {
  for (const grant of workerWritable) {
    if (
      grant === "/" || path === grant || path.startsWith(`${grant}/`)
    ) return grant;
  }
  return undefined;
}

/**
 * Whether `path` is an executable file, `false` when there is none.
 *
 * @param path An absolute path.
 * @param denied Called when the parent cannot look.
 * @returns Whether an executable file is there.
 */
export function isExecutableFile(path: string, denied: LookupDenied): boolean {
  try {
    const stat = statSync(path);
    return stat.isFile() && (stat.mode & 0o111) !== 0;
  } catch (error: unknown) {
    const code = (error as { code?: unknown } | null)?.code;
    if (typeof code === "string" && ABSENT.has(code)) return false;
    return denied(
      `cannot look at "${path}": ${
        error instanceof Error ? error.message : String(error)
      }`,
      error,
    );
  }
}

/** Where {@linkcode findExecutable} looks. */
export interface LookupPlaces {
  /** A PATH value (absolute entries only are searched). */
  path: string | undefined;
  /** Directories whose `node_modules/.bin`, walking up to the root, are searched after PATH. */
  from?: readonly string[];
}

/**
 * Finds an executable by name on PATH, then in `node_modules/.bin` of the
 * `from` directories and their ancestors, and returns its real path. A
 * candidate under a path a worker was granted write access to is refused
 * through `denied`.
 *
 * @param name The program's name (no slash).
 * @param places Where to look.
 * @param denied Called when a lookup cannot be made or a candidate is refused.
 * @returns The real path of the executable, or `undefined` when none exists.
 */
export function findExecutable(
  name: string,
  places: LookupPlaces,
  denied: LookupDenied,
): string | undefined {
  const candidates: string[] = [];
  for (const dir of (places.path ?? "").split(delimiter)) {
    if (dir && isAbsolute(dir)) candidates.push(join(dir, name));
  }
  for (const start of places.from ?? []) {
    for (let dir = start;; dir = dirname(dir)) {
      candidates.push(join(dir, "node_modules", ".bin", name));
      if (dirname(dir) === dir) break;
    }
  }
  for (const candidate of candidates) {
    if (isExecutableFile(candidate, denied)) {
      return trustedRealPath(candidate, denied);
    }
  }
  return undefined;
}

/**
 * The real path of an executable, refused (through `denied`) when it or
 * the link leading to it lies where a worker of this process may write.
 *
 * @param path An existing executable's path.
 * @param denied Called when the path is refused or cannot be resolved.
 * @returns Its real path.
 */
export function trustedRealPath(path: string, denied: LookupDenied): string {
  let real: string;
  try {
    real = realpathSync(path);
  } catch (error: unknown) {
    return denied(
      `cannot resolve "${path}": ${
        error instanceof Error ? error.message : String(error)
      }`,
      error,
    );
  }
  for (const candidate of [path, real]) {
    const grant = writableByWorker(candidate);
    if (grant !== undefined) {
      return denied(
        `refusing to run "${candidate}": a worker was granted write access to "${grant}" and could have planted it; install the program outside every write grant`,
        undefined,
      );
    }
  }
  return real;
}

/**
 * Resolves the program of a `command` before anything is spawned: a path
 * (with a slash) must be an executable file; a name is looked up on PATH.
 * A script's `#!` interpreter, when given as a path, must exist too.
 *
 * @param program The program as given.
 * @param cwd The worker's working directory (relative paths resolve there).
 * @param path The PATH to search for a bare name.
 * @param denied Called when a lookup cannot be made.
 * @returns The absolute path, or a sentence saying why it cannot run.
 */
export function resolveProgram(
  program: string,
  cwd: string,
  path: string | undefined,
  denied: LookupDenied,
): { path: string } | { missing: string } {
  let found: string | undefined;
  if (program.includes("/")) {
    const absolute = resolve(cwd, program);
    if (isExecutableFile(absolute, denied)) found = absolute;
  } else {
    for (const dir of (path ?? "").split(delimiter)) {
      if (!dir || !isAbsolute(dir)) continue;
      const candidate = join(dir, program);
      if (isExecutableFile(candidate, denied)) {
        found = candidate;
        break;
      }
    }
  }
  if (found === undefined) {
    return {
      missing: program.includes("/")
        ? `"${program}" does not exist or is not an executable file`
        : `"${program}" was not found on PATH`,
    };
  }
  // A program a worker may have planted (or swapped for a link) is refused,
  // as every lookup's: the worker would run its code with this one's grants.
  trustedRealPath(found, denied);
  const interpreter = shebangInterpreter(found);
  if (
    interpreter !== undefined && !isExecutableFile(interpreter, denied)
  ) {
    return {
      missing:
        `the interpreter "${interpreter}" named by the first line of "${found}" does not exist or is not executable`,
    };
  }
  return { path: found };
}

/** The absolute interpreter path of a `#!` script, if it is one. */
function shebangInterpreter(file: string): string | undefined {
  let head: string;
  try {
    const fd = openSync(file, "r");
    try {
      const bytes = new Uint8Array(256);
      const read = readSync(fd, bytes, 0, bytes.length, 0);
      head = new TextDecoder("latin1").decode(bytes.subarray(0, read));
    } finally {
      closeSync(fd);
    }
  } catch {
    return undefined;
  }
  if (!head.startsWith("#!")) return undefined;
  const line = head.slice(2).split("\n")[0]?.trim() ?? "";
  const interpreter = line.split(/\s+/)[0] ?? "";
  return isAbsolute(interpreter) ? interpreter : undefined;
}

/** Reads up to `length` bytes of `file` at `position`; empty when it cannot. */
function readHead(file: string, length: number, position = 0): Uint8Array {
  try {
    const fd = openSync(file, "r");
    try {
      const bytes = new Uint8Array(length);
      const read = readSync(fd, bytes, 0, length, position);
      return bytes.subarray(0, read);
    } finally {
      closeSync(fd);
    }
  } catch {
    return new Uint8Array(0);
  }
}

/**
 * The ELF interpreter (`PT_INTERP`: the dynamic loader, `ld.so`) of a
 * 64-bit little-endian ELF file, or `undefined` (not such an ELF, or static).
 *
 * @param file An executable's path.
 * @returns The interpreter's path as the file names it.
 */
export function elfInterpreter(file: string): string | undefined {
  const head = readHead(file, 4096);
  if (
    head.byteLength < 64 || head[0] !== 0x7f || head[1] !== 0x45 ||
    head[2] !== 0x4c || head[3] !== 0x46 || head[4] !== 2 || head[5] !== 1
  ) return undefined;
  const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
  const phoff = Number(view.getBigUint64(32, true));
  const phentsize = view.getUint16(54, true);
  const phnum = view.getUint16(56, true);
  if (phentsize < 56 || phnum > 256) return undefined;
  const table = phoff + phentsize * phnum <= head.byteLength
    ? head.subarray(phoff, phoff + phentsize * phnum)
    : readHead(file, phentsize * phnum, phoff);
  const headers = new DataView(
    table.buffer,
    table.byteOffset,
    table.byteLength,
  );
  for (let index = 0; index < phnum; index++) {
    const at = index * phentsize;
    if (at + 56 > table.byteLength) return undefined;
    if (headers.getUint32(at, true) !== 3) continue; // PT_INTERP
    const offset = Number(headers.getBigUint64(at + 8, true));
    const size = Number(headers.getBigUint64(at + 32, true));
    if (size < 2 || size > 4096) return undefined;
    const bytes = readHead(file, size, offset);
    const name = new TextDecoder("latin1").decode(bytes).replace(/\0.*$/s, "");
    return isAbsolute(name) ? name : undefined;
  }
  return undefined;
}

/**
 * The files a program needs to execute (each by its real path): the
 * program, the interpreter of a `#!` script (and for `#!/usr/bin/env NAME`,
 * NAME on `path`), and the ELF interpreter of each. What a `run` grant or a
 * runtime gets execute on, and nothing else.
 *
 * @param program The program's path.
 * @param path The PATH `#!/usr/bin/env NAME` is resolved on.
 * @param denied Called when a lookup cannot be made.
 * @returns Real paths, the program first.
 */
export function executionFiles(
  program: string,
  path: string | undefined,
  denied: LookupDenied,
): string[] {
  const files: string[] = [];
  const add = (file: string, depth: number): void => {
    let real: string;
    try {
      real = realpathSync(file);
    } catch {
      return;
    }
    if (files.includes(real) || depth > 4) return;
    files.push(real);
    const elf = elfInterpreter(real);
    if (elf !== undefined) add(elf, depth + 1);
    const interpreter = shebangInterpreter(real);
    if (interpreter === undefined) return;
    add(interpreter, depth + 1);
    // #!/usr/bin/env NAME: NAME on PATH.
    if (basenameOf(interpreter) === "env") {
      const line = new TextDecoder("latin1").decode(readHead(real, 256))
        .slice(2).split("\n")[0]?.trim().split(/\s+/) ?? [];
      const name = line.slice(1).find((word) => !word.startsWith("-"));
      if (name !== undefined && !name.includes("=")) {
        const found = name.includes("/")
          ? name
          : (path ?? "").split(delimiter).filter((dir) => isAbsolute(dir))
            .map((dir) => join(dir, name)).find((candidate) =>
              isExecutableFile(candidate, denied)
            );
        if (found !== undefined) add(found, depth + 1);
      }
    }
  };
  add(program, 0);
  return files;
}

function basenameOf(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** A `run` name resolved at start: where it was found, and what it executes. */
export interface RunProgram {
  /** The name as granted. */
  name: string;
  /** The path it was found at on the worker's PATH (not resolved). */
  found: string;
  /** What it needs to execute ({@linkcode executionFiles}). */
  files: string[];
}

/**
 * Resolves each `run` name on the worker's PATH, at start: the program a
 * name runs is the first executable file of that name on PATH, as the
 * worker's runtime would find it. A name found nowhere is left out (there
 * is nothing to run).
 *
 * @param names The granted names (entries without a slash).
 * @param path The worker's PATH.
 * @param denied Called when a lookup cannot be made.
 * @returns One entry per name found.
 */
export function resolveRunNames(
  names: readonly string[],
  path: string,
  denied: LookupDenied,
): RunProgram[] {
  const programs: RunProgram[] = [];
  for (const name of names) {
    for (const dir of path.split(delimiter)) {
      if (!dir || !isAbsolute(dir)) continue;
      const candidate = join(dir, name);
      if (!isExecutableFile(candidate, denied)) continue;
      // One a worker could have planted is refused, as every lookup's.
      trustedRealPath(candidate, denied);
      programs.push({
        name,
        found: candidate,
        files: executionFiles(candidate, path, denied),
      });
      break;
    }
  }
  return programs;
}
