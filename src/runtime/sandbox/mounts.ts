/**
 * Mount discovery: which files a sandboxed worker must see read-only to load
 * its code (its project, packages, configs, airlock's own code, Deno's
 * caches), found by walking the file system. Its result feeds `bwrap.ts`.
 *
 * @module
 */

import {
  basename,
  dirname,
  existsSync,
  join,
  posix,
  readdirSync,
  realpathSync,
  statSync,
} from "../node_builtins.ts";
import { covers, normalizePath } from "./paths.ts";
import { writableByWorker } from "../launch/executable.ts";

/**
 * Whether mounting `path` would show too much: `/`, the user's home or one
 * of its ancestors.
 *
 * @param path A real, absolute path.
 * @param home The user's home directory, if known.
 * @returns Whether it must never be mounted for a worker's code.
 */
export function tooBroad(path: string, home: string | undefined): boolean {
  if (path === "/") return true;
  return home !== undefined && home !== "" && covers(path, home);
}

/**
 * The path to mount for a discovered location, or `undefined` when it must
 * not be mounted. Links are resolved here, once: the real path is what is
 * mounted, so a link a worker swaps later changes nothing. Refused: a path
 * that does not resolve, that resolves to `/`, the user's home or one of its
 * ancestors, a link lying where a worker may write (a planted link), and a
 * real path a worker may write (its write grant mounts it anyway).
 *
 * @param path A discovered absolute path.
 * @param home The user's home directory, if known.
 * @returns The path to mount, or `undefined`.
 */
export function trustedMount(
  path: string,
  home: string | undefined,
): string | undefined {
  let real: string;
  try {
    real = realpathSync(path);
  } catch {
    return undefined;
  }
  if (tooBroad(real, home)) return undefined;
  if (real !== path && writableByWorker(path) !== undefined) return undefined;
  if (writableByWorker(real) !== undefined) return undefined;
  return real;
}

/**
 * Where Deno keeps its module caches, and what a sandboxed Deno worker needs
 * of them: `remote` (https: and jsr: modules, airlock itself when installed
 * from JSR) and `npm` (npm: packages without a node_modules directory),
 * read-only. The rest of the cache directory (other programs' localStorage,
 * analysis caches) stays hidden. Set `DENO_DIR` to `denoDir` in the worker's
 * environment: without it, and with no HOME, Deno refuses to start.
 *
 * @param env The parent's environment (`DENO_DIR`, `XDG_CACHE_HOME`, `HOME`).
 * @returns The cache directory and the paths to mount, or `undefined` when
 * none can be determined.
 *
 * @example
 * ```ts
 * import { denoCacheMounts } from "./mounts.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(denoCacheMounts({ HOME: "/home/ada" }), {
 *   denoDir: "/home/ada/.cache/deno",
 *   readOnly: ["/home/ada/.cache/deno/remote", "/home/ada/.cache/deno/npm"],
 * });
 * ```
 */
export function denoCacheMounts(
  env: Readonly<Record<string, string | undefined>>,
): { denoDir: string; readOnly: string[] } | undefined {
  let denoDir: string | undefined;
  if (env.DENO_DIR && posix.isAbsolute(env.DENO_DIR)) denoDir = env.DENO_DIR;
  else if (env.XDG_CACHE_HOME && posix.isAbsolute(env.XDG_CACHE_HOME)) {
    denoDir = posix.join(env.XDG_CACHE_HOME, "deno");
  } else if (env.HOME && posix.isAbsolute(env.HOME)) {
    denoDir = posix.join(env.HOME, ".cache", "deno");
  }
  if (denoDir === undefined) return undefined;
  denoDir = normalizePath(denoDir, "DENO_DIR");
  return {
    denoDir,
    readOnly: [posix.join(denoDir, "remote"), posix.join(denoDir, "npm")],
  };
}

/** Options of {@linkcode workerMounts}. */
export interface WorkerMountsOptions {
  /** The worker's runtime. */
  runtime: "deno" | "bun";
  /** The user's module: an absolute path, or `undefined` when it is remote. */
  module: string | undefined;
  /** airlock's `workers/entry.ts` (or `.js`): an absolute path, or `undefined` when remote (JSR). */
  entry: string | undefined;
  /**
   * The Deno config file passed with `--config`, if any.
   *
   * @default {undefined}
   */
  config?: string | undefined;
  /** The parent's environment, for Deno's cache directory. */
  env: Readonly<Record<string, string | undefined>>;
}

/** What {@linkcode workerMounts} found. */
export interface WorkerMounts {
  /** Paths to pass as {@linkcode BwrapOptions} `readOnly`. All exist. */
  readOnly: string[];
  /**
   * Directories to allow listing only (see `LaunchStep` `listOnly`):
   * airlock's root for a Bun worker, whose resolver lists it to import
   * `worker.ts` or `mod.ts` from it. All exist.
   */
  listOnly: string[];
  /** Deno's cache directory, to set as `DENO_DIR` in the worker's environment (Deno only). */
  denoDir: string | undefined;
}

/**
 * The nearest directory at or above `start` that holds a `package.json`,
 * `deno.json` or `deno.jsonc`: the module's project.
 *
 * @param start The module's directory.
 * @returns The project directory, or `start` when there is none.
 */
export function projectRoot(start: string): string {
  for (let dir = start;; dir = dirname(dir)) {
    for (const name of ["package.json", "deno.json", "deno.jsonc"]) {
      if (existsSync(join(dir, name))) return dir;
    }
    if (dirname(dir) === dir) return start;
  }
}

/** Config files a runtime reads beside the code, looked up in the module's directory and its ancestors. */
const CONFIG_FILES: readonly string[] = [
  "package.json",
  "deno.json",
  "deno.jsonc",
  "deno.lock",
  "import_map.json",
  "tsconfig.json",
  "jsconfig.json",
  "bunfig.toml",
];

/**
 * The read-only paths a worker needs to start and import its code, found on
 * disk: the module's project (the nearest directory above it holding a
 * `package.json`, `deno.json` or `deno.jsonc`, else the module's own
 * directory), every `node_modules` from there up to the root plus the real
 * locations of packages linked into them (workspaces), the config files of
 * those directories and of `config`'s, airlock's own code (`workers/`,
 * `src/`, `mod.ts`, `worker.ts`; for Bun, airlock's root to list only) and,
 * for Deno, its module caches
 * ({@linkcode denoCacheMounts}). Code the module imports from outside its
 * project, other than packages, needs a read grant.
 *
 * Nothing is mounted because a worker could have made a link to it: every
 * path goes through {@linkcode trustedMount} (real path; never `/`, the
 * user's home or an ancestor of it; never a link where a worker may write),
 * a project root that would be too broad falls back to the module's
 * directory, links in a `node_modules` a worker may write are ignored, and a
 * linked package must lie inside its workspace root.
 *
 * @param options Where the module, airlock and the config are.
 * @returns The paths and Deno's cache directory.
 *
 * @example
 * ```ts
 * import { workerMounts } from "./mounts.ts";
 * import assert from "node:assert/strict";
 *
 * const mounts = workerMounts({
 *   runtime: "bun",
 *   module: undefined,
 *   entry: undefined,
 *   env: {},
 * });
 * assert.deepEqual(mounts, { readOnly: [], listOnly: [], denoDir: undefined });
 * ```
 */
export function workerMounts(options: WorkerMountsOptions): WorkerMounts {
  const home = options.env.HOME;
  const found = new Set<string>();
  const listOnly: string[] = [];
  const add = (path: string): void => {
    if (!existsSync(path)) return;
    const mount = trustedMount(path, home);
    if (mount !== undefined) found.add(mount);
  };
  const ancestors = (start: string): string[] => {
    const dirs = [start];
    for (let dir = start; dirname(dir) !== dir;) {
      dir = dirname(dir);
      dirs.push(dir);
    }
    return dirs;
  };
  const starts: string[] = [];
  if (options.module !== undefined) {
    const dir = dirname(options.module);
    const project = projectRoot(dir);
    // A package.json in the home directory does not make it the project.
    add(tooBroad(trustedRealPath(project), home) ? dir : project);
    starts.push(dir);
  }
  if (options.config !== undefined) {
    add(options.config);
    starts.push(dirname(options.config));
  }
  for (const start of starts) {
    for (const dir of ancestors(start)) {
      for (const name of CONFIG_FILES) add(join(dir, name));
      const modules = join(dir, "node_modules");
      if (existsSync(modules)) {
        add(modules);
        // Links in a node_modules a worker may write are its own doing.
        if (writableByWorker(modules) !== undefined) continue;
        for (const target of linkedPackages(modules, home)) add(target);
      }
    }
  }
  if (options.entry !== undefined) {
    const workers = dirname(options.entry);
    if (basename(workers) === "workers") {
      const root = dirname(workers);
      add(workers);
      add(join(root, "src"));
      for (const name of ["mod", "worker"]) {
        add(join(root, `${name}.ts`));
        add(join(root, `${name}.js`));
      }
      // Bun resolves `import "<root>/worker.ts"` by listing `<root>`, whose
      // files are granted one by one: listing, not reading, the rest.
      if (options.runtime === "bun") {
        const mount = trustedMount(root, home);
        if (mount !== undefined) listOnly.push(mount);
      }
    } else {
      add(workers);
    }
  }
  let denoDir: string | undefined;
  if (options.runtime === "deno") {
    const cache = denoCacheMounts(options.env);
    if (cache !== undefined) {
      denoDir = cache.denoDir;
      for (const path of cache.readOnly) add(path);
    }
  }
  return { readOnly: [...found], listOnly, denoDir };
}

function trustedRealPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/** Files that mark a project or workspace root. */
const ROOT_MARKERS: readonly string[] = [
  "package.json",
  "deno.json",
  "deno.jsonc",
  "pnpm-workspace.yaml",
];

/**
 * The outermost directory at or above `dir` that holds a project file and
 * is not too broad to mount (see {@linkcode tooBroad}): the workspace root
 * of a monorepo, or the project itself.
 */
function workspaceRoot(dir: string, home: string | undefined): string {
  let root = dir;
  for (let current = dir;; current = dirname(current)) {
    if (tooBroad(current, home)) break;
    if (ROOT_MARKERS.some((name) => existsSync(join(current, name)))) {
      root = current;
    }
    if (dirname(current) === current) break;
  }
  return root;
}

/**
 * Real locations of packages symlinked into a node_modules directory
 * (workspaces, `npm link`) that lie outside it but inside its workspace
 * root: a link anywhere else (`node_modules/evil -> /`) is not a package of
 * this project and is not followed.
 */
function linkedPackages(modules: string, home: string | undefined): string[] {
  const root = workspaceRoot(dirname(trustedRealPath(modules)), home);
  const targets: string[] = [];
  const visit = (dir: string, depth: number): void => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      const path = join(dir, entry.name);
      if (entry.isSymbolicLink()) {
        try {
          const target = realpathSync(path);
          if (
            !covers(modules, target) && covers(root, target) &&
            statSync(target).isDirectory()
          ) {
            targets.push(target);
          }
        } catch {
          // A dangling link: nothing to mount.
        }
      } else if (
        depth === 0 && entry.isDirectory() && entry.name.startsWith("@")
      ) {
        visit(path, 1);
      }
    }
  };
  visit(modules, 0);
  return targets;
}
