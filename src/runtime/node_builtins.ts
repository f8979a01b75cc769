/**
 * The Node built-ins airlock's parent side uses, loaded on first use.
 *
 * On Deno, the first `node:` import (or touching the `process` global)
 * starts Node compatibility, a cost at start (docs/benchmarks.md, "Figures
 * behind the code"); a static `node:` import anywhere in `mod.ts`'s graph
 * made every program that imports airlock pay it, whether it starts a
 * worker or not.
 * These bindings have the built-ins' names and types and load the module
 * (`process.getBuiltinModule`, on both runtimes) the first time one of them
 * is called, so only the paths that use them pay. `process.platform` and
 * `process.arch` come from `Deno.build` on Deno, without Node compatibility.
 *
 * Nothing here may be called while a module is being imported.
 *
 * @module
 */

import type * as Buffer_ from "node:buffer";
import type * as ChildProcess from "node:child_process";
import type * as Crypto from "node:crypto";
import type * as DiagnosticsChannel from "node:diagnostics_channel";
import type * as Fs from "node:fs";
import type * as FsPromises from "node:fs/promises";
import type * as Os from "node:os";
import type * as Path from "node:path";
import type * as Url from "node:url";
import type * as Util from "node:util";
import { nextTurn } from "./turns.ts";
import {
  posixBasename,
  posixFileUrlToPath,
  posixIsAbsolute,
  posixPathToFileUrl,
  posixResolve,
} from "./posix_path.ts";

interface NodeProcess {
  readonly platform: string;
  readonly arch: string;
  readonly env: Record<string, string | undefined>;
  kill(pid: number, signal?: string | number): true;
  geteuid?(): number;
  getBuiltinModule(id: string): unknown;
  on(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

interface DenoBuild {
  readonly build: { readonly os: string; readonly arch: string };
  statSync(path: string): { readonly isFile: boolean };
}

function nodeProcess(): NodeProcess {
  return (globalThis as unknown as { process: NodeProcess }).process;
}

/** The built-ins loaded so far, by id. */
const loadedBuiltins = new Set<string>();

/** Loads a built-in once, on first use. */
function loader<T>(id: string): () => T {
  let loaded: T | undefined;
  return () => {
    if (loaded === undefined) {
      loaded = nodeProcess().getBuiltinModule(id) as T;
      loadedBuiltins.add(id);
    }
    return loaded;
  };
}

const fs = loader<typeof Fs>("node:fs");
const path = loader<typeof Path>("node:path");
const url = loader<typeof Url>("node:url");
const os = loader<typeof Os>("node:os");
const childProcess = loader<typeof ChildProcess>("node:child_process");
const buffer = loader<typeof Buffer_>("node:buffer");
const crypto = loader<typeof Crypto>("node:crypto");
const util = loader<typeof Util>("node:util");

/**
 * `node:diagnostics_channel`, loaded on first use (the parent's events:
 * src/parent/_events.ts).
 */
export const diagnosticsChannel: () => typeof DiagnosticsChannel = loader<
  typeof DiagnosticsChannel
>("node:diagnostics_channel");

/** What {@linkcode loadSpawnBuiltins} loads, in order. */
const SPAWN_BUILTINS: readonly (() => unknown)[] = [
  loader("node:dns"),
  loader("node:net"),
  childProcess,
];

/** Whether {@linkcode loadStartBuiltins} loaded them all. */
let startBuiltinsLoaded = false;

/**
 * The built-ins a worker's start uses (the command build, the sandbox's
 * probes and files, the spawn, the start event), in the order it first
 * touches them. Not `node:crypto`: the start hashes without it
 * (src/runtime/sha256.ts; Bun's own hasher for the Bun bundle). Not
 * `node:child_process`: only a start that spawns through it (the sandbox's
 * probes, the Bun bundle's build: once per process) loads it, with
 * {@linkcode loadSpawnBuiltins}; the worker's spawn is the runtime's own.
 */
const START_BUILTINS: readonly (() => unknown)[] = [
  fs,
  path,
  url,
  os,
  buffer,
  diagnosticsChannel,
];

/**
 * Loads the built-ins a worker's start uses that are not loaded yet, one
 * per turn of the event loop. The first use of a built-in is its load (on
 * Deno, Node compatibility's JavaScript, several ms each); made here, the
 * start's synchronous command build never pays it in one block.
 *
 * @returns When they are all loaded.
 */
export async function loadStartBuiltins(): Promise<void> {
  if (startBuiltinsLoaded) return;
  for (const load of START_BUILTINS) {
    const before = loadedBuiltins.size;
    load();
    if (loadedBuiltins.size > before) await nextTurn();
  }
  startBuiltinsLoaded = true;
}

/**
 * Loads `node:child_process` (and, on Deno, the `node:net` sockets its
 * pipes are) if not loaded yet, each in a turn of its own: for a start
 * that spawns through it (the sandbox's probes, the Bun bundle's build).
 *
 * @returns When they are loaded.
 */
export async function loadSpawnBuiltins(): Promise<void> {
  for (const load of SPAWN_BUILTINS) {
    const before = loadedBuiltins.size;
    load();
    if (loadedBuiltins.size > before) await nextTurn();
  }
}

/** A function of a module, bound on first call. */
function lazy<M, K extends keyof M>(load: () => M, key: K): M[K] {
  return ((...args: unknown[]) =>
    (load()[key] as (...args: unknown[]) => unknown)(...args)) as M[K];
}

/** `node:crypto` `createHash`. */
export const createHash: typeof Crypto.createHash = lazy(
  crypto,
  "createHash",
);
const fsPromises = (): typeof FsPromises => fs().promises as typeof FsPromises;

/** `node:fs/promises` `readdir`. */
export const readdir: typeof FsPromises.readdir = lazy(fsPromises, "readdir");
/** `node:fs/promises` `lstat`. */
export const lstat: typeof FsPromises.lstat = lazy(fsPromises, "lstat");
/** `node:fs/promises` `rm`. */
export const rm: typeof FsPromises.rm = lazy(fsPromises, "rm");
/** `node:fs` `lstatSync`. */
export const lstatSync: typeof Fs.lstatSync = lazy(fs, "lstatSync");
/** `node:fs` `mkdtempSync`. */
export const mkdtempSync: typeof Fs.mkdtempSync = lazy(fs, "mkdtempSync");
/** `node:os` `tmpdir`. */
export const tmpdir: typeof Os.tmpdir = lazy(os, "tmpdir");
/** `node:fs` `mkdirSync`. */
export const mkdirSync: typeof Fs.mkdirSync = lazy(fs, "mkdirSync");
/** `node:fs` `readlinkSync`. */
export const readlinkSync: typeof Fs.readlinkSync = lazy(fs, "readlinkSync");
/** `node:fs` `renameSync`. */
export const renameSync: typeof Fs.renameSync = lazy(fs, "renameSync");
/** `node:fs` `writeFileSync`. */
export const writeFileSync: typeof Fs.writeFileSync = lazy(fs, "writeFileSync");
/** `node:fs` `rmSync`. */
export const rmSync: typeof Fs.rmSync = lazy(fs, "rmSync");
/** `node:fs` `rmdirSync`. */
export const rmdirSync: typeof Fs.rmdirSync = lazy(fs, "rmdirSync");
/** `node:fs` `symlinkSync`. */
export const symlinkSync: typeof Fs.symlinkSync = lazy(fs, "symlinkSync");
/** `node:fs` `closeSync`. */
export const closeSync: typeof Fs.closeSync = lazy(fs, "closeSync");
/** `node:fs` `existsSync`. */
export const existsSync: typeof Fs.existsSync = lazy(fs, "existsSync");
/** `node:fs` `openSync`. */
export const openSync: typeof Fs.openSync = lazy(fs, "openSync");
/** `node:fs` `readdirSync`. */
export const readdirSync: typeof Fs.readdirSync = lazy(fs, "readdirSync");
/** `node:fs` `readFileSync`. */
export const readFileSync: typeof Fs.readFileSync = lazy(fs, "readFileSync");
/** `node:fs` `readSync`. */
export const readSync: typeof Fs.readSync = lazy(fs, "readSync");
/** `node:fs` `realpathSync`. */
export const realpathSync: typeof Fs.realpathSync = lazy(fs, "realpathSync");
/** `node:fs` `statSync`. */
export const statSync: typeof Fs.statSync = lazy(fs, "statSync");

/** The members of Bun's `Bun.file()` that {@linkcode fileKind} reads. */
interface BunFiles {
  file(path: string): { readonly lastModified: number; readonly size: number };
}

/**
 * What Bun's `lastModified` is for a path it cannot stat (missing, not to
 * be looked at): `2 ** 52 - 1` on Bun 1.4 (any other non-number counts as
 * missing too; a test compares every kind with `node:fs`).
 */
const BUN_NO_FILE = 2 ** 52 - 1;

/**
 * What a path is, links followed: a regular file, something else, or
 * missing (or not to be looked at: no read permission). By the runtime's
 * own calls, so that a check made before anything else (a worker's module,
 * synchronously in `oneShot()`) does not pay the first load of `node:fs`
 * (about 10 ms in one block on Deno, 3 to 20 ms on Bun): `Deno.statSync`;
 * on Bun, `Bun.file()`'s stat (a directory is what `<path>/.` names, a
 * device or pipe has no size); `node:fs` elsewhere.
 *
 * @param path The path.
 * @returns Its kind.
 */
export function fileKind(path: string): "file" | "other" | "missing" {
  const deno = (globalThis as { Deno?: DenoBuild }).Deno;
  const bun = (globalThis as { Bun?: BunFiles }).Bun;
  if (deno === undefined && typeof bun?.file === "function") {
    const seen = (p: string): boolean => {
      const time = bun.file(p).lastModified;
      return typeof time === "number" && Number.isFinite(time) &&
        time !== BUN_NO_FILE;
    };
    if (!seen(path)) return "missing";
    return bun.file(path).size === Infinity || seen(`${path}/.`)
      ? "other"
      : "file";
  }
  try {
    const isFile = deno === undefined
      ? fs().statSync(path).isFile()
      : deno.statSync(path).isFile;
    return isFile ? "file" : "other";
  } catch {
    return "missing";
  }
}

/**
 * Whether paths are POSIX ones: then `basename`, `isAbsolute`, `resolve`,
 * `fileURLToPath` and `pathToFileURL` are airlock's own (`posix_path.ts`,
 * same results), so that a worker's option validation loads neither
 * `node:path` nor `node:url`.
 */
function posixPaths(): boolean {
  return process.platform !== "win32";
}

/** `node:path` `basename`. */
export const basename: typeof Path.basename = (p, suffix) =>
  suffix === undefined && typeof p === "string" && posixPaths()
    ? posixBasename(p)
    : path().basename(p, suffix);
/** `node:path` `dirname`. */
export const dirname: typeof Path.dirname = lazy(path, "dirname");
/** `node:path` `isAbsolute`. */
export const isAbsolute: typeof Path.isAbsolute = (p) =>
  typeof p === "string" && posixPaths()
    ? posixIsAbsolute(p)
    : path().isAbsolute(p);
/** `node:path` `relative`. */
export const relative: typeof Path.relative = lazy(path, "relative");
/** `node:path` `join`. */
export const join: typeof Path.join = lazy(path, "join");
/** `node:path` `resolve`. */
export const resolve: typeof Path.resolve = (...paths) =>
  (posixPaths() && paths.every((p) => typeof p === "string")
    ? posixResolve(...paths)
    : undefined) ?? path().resolve(...paths);
/** `node:path` `posix`: the members airlock uses. */
export const posix: Pick<
  typeof Path.posix,
  "isAbsolute" | "join" | "normalize"
> = {
  isAbsolute: (p) => path().posix.isAbsolute(p),
  join: (...paths) => path().posix.join(...paths),
  normalize: (p) => path().posix.normalize(p),
};

/** `node:url` `fileURLToPath`. */
export const fileURLToPath: typeof Url.fileURLToPath = (u, options) =>
  options === undefined && posixPaths()
    ? posixFileUrlToPath(u)
    : url().fileURLToPath(u, options);
/** `node:url` `pathToFileURL`. */
export const pathToFileURL: typeof Url.pathToFileURL = (p, options) =>
  (options === undefined && typeof p === "string" && posixPaths()
    ? posixPathToFileUrl(p)
    : undefined) ?? url().pathToFileURL(p, options);

/**
 * `node:os` `availableParallelism`: the web's
 * `navigator.hardwareConcurrency` where there is one (the same count on
 * Deno and Bun, CPU affinity included), so that resolving a worker's
 * options does not load `node:os`.
 */
export const availableParallelism: typeof Os.availableParallelism = () => {
  const count = (globalThis as { navigator?: { hardwareConcurrency?: number } })
    .navigator?.hardwareConcurrency;
  return typeof count === "number" && Number.isSafeInteger(count) && count > 0
    ? count
    : os().availableParallelism();
};

/** `node:os` `release`. */
export const osRelease: typeof Os.release = lazy(os, "release");

/**
 * `node:os` `constants.signals`.
 *
 * @returns The signal numbers by name.
 */
export function signalConstants(): typeof Os.constants.signals {
  return os().constants.signals;
}

/** `node:child_process` `spawnSync`. */
export const spawnSync: typeof ChildProcess.spawnSync = lazy(
  childProcess,
  "spawnSync",
);

/** `node:child_process` `spawn`. */
export const spawn: typeof ChildProcess.spawn = lazy(childProcess, "spawn");

/** `node:buffer` `Buffer`: the members airlock uses. */
export const Buffer: Pick<typeof Buffer_.Buffer, "from"> = {
  from: lazy(() => buffer().Buffer, "from"),
};

const ARCH: Readonly<Record<string, string>> = {
  "x86_64": "x64",
  aarch64: "arm64",
};

/**
 * `node:process`: the members airlock uses. `platform` and `arch` come from
 * `Deno.build` on Deno (Node's names: `"linux"`, `"x64"`), so reading them
 * does not start Node compatibility.
 */
export const process:
  & Pick<NodeProcess, "platform" | "arch" | "env" | "kill">
  & { effectiveUid(): number | undefined } = {
    get platform(): string {
      const deno = (globalThis as { Deno?: DenoBuild }).Deno;
      if (deno === undefined) return nodeProcess().platform;
      return deno.build.os === "windows" ? "win32" : deno.build.os;
    },
    get arch(): string {
      const deno = (globalThis as { Deno?: DenoBuild }).Deno;
      if (deno === undefined) return nodeProcess().arch;
      return ARCH[deno.build.arch] ?? deno.build.arch;
    },
    get env(): Record<string, string | undefined> {
      return nodeProcess().env;
    },
    kill(pid, signal) {
      return nodeProcess().kill(pid, signal);
    },
    /** The effective uid; `undefined` where there is none (Windows). */
    effectiveUid(): number | undefined {
      const node = nodeProcess();
      return typeof node.geteuid === "function" ? node.geteuid() : undefined;
    },
  };

/**
 * `node:path` `delimiter`, the separator of `PATH` entries: `;` on
 * Windows, `:` elsewhere.
 */
export const delimiter: string = process.platform === "win32" ? ";" : ":";

/** `node:util` `isDeepStrictEqual`. */
export const isDeepStrictEqual: typeof Util.isDeepStrictEqual = lazy(
  util,
  "isDeepStrictEqual",
);

/**
 * Listens for a signal through `node:process` (both runtimes): while a
 * listener is on, the signal does not end the process.
 *
 * @param signal The signal's name.
 * @param listener Called on each delivery.
 * @returns Removes the listener (the signal's default action is back).
 */
export function onSignal(signal: string, listener: () => void): () => void {
  const node = nodeProcess();
  node.on(signal, listener);
  return () => void node.off(signal, listener);
}
