/**
 * The worker entry of Bun workers, pre-bundled: airlock's worker side
 * (`workers/entry.ts` and the ~20 modules it imports) built once into one
 * JavaScript file and cached, so a Bun worker does not transpile and link
 * those modules on every start. In the OS sandbox Bun runs without its
 * transpiler cache, where this halves the CPU a worker spends before it is
 * ready (see docs/benchmarks.md, (e)). The user's module is not bundled: it
 * is imported at run time as before.
 *
 * One bundle per airlock tree and Bun binary, kept under
 * `$XDG_CACHE_HOME/airlock/bun-entry` (or `~/.cache/…`) with a stamp of the
 * sizes and modification times of airlock's source files and the binary; it
 * is rebuilt (with the worker's own `bun build`, written atomically) when the
 * stamp no longer matches. Where it cannot be
 * built (no cache directory, a read-only one, a failed build) workers run
 * `workers/entry.ts` itself, as before: slower, never less confined (the
 * bundle is mounted read-only like the rest of airlock's code).
 *
 * @module
 */

import {
  dirname,
  existsSync,
  join,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  spawnSync,
  statSync,
  writeFileSync,
} from "./node_builtins.ts";

/** Built or looked up once per process: key `binary\0entry`. */
const bundles = new Map<string, string | undefined>();

/** The source files that decide the bundle: all of airlock's code. */
function sources(root: string, entry: string): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.(ts|js)$/.test(entry.name)) found.push(path);
    }
  };
  walk(join(root, "src"));
  found.push(entry);
  return found.sort();
}

/**
 * What the bundle was built from: each source's size and modification
 * time, and the Bun binary's. A bundle is reused while this is unchanged
 * (stat calls only: no file is read or hashed on the way to a worker).
 */
function stamp(binary: string, entry: string): string {
  const parts: string[] = [];
  for (const path of [binary, ...sources(dirname(dirname(entry)), entry)]) {
    const info = statSync(path);
    parts.push(`${path}\0${info.size}\0${info.mtimeMs}`);
  }
  return parts.join("\n");
}

/** A short, stable name for a string (FNV-1a, 2 x 32 bits). */
function shortHash(text: string): string {
  let a = 0x811c9dc5;
  let b = 0x01000193 ^ text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
  }
  return (a >>> 0).toString(16).padStart(8, "0") +
    (b >>> 0).toString(16).padStart(8, "0");
}

function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

function cacheDir(
  env: Readonly<Record<string, string | undefined>>,
): string | undefined {
  const base = env.XDG_CACHE_HOME ??
    (env.HOME ? join(env.HOME, ".cache") : undefined);
  return base === undefined ? undefined : join(base, "airlock", "bun-entry");
}

function build(
  binary: string,
  entry: string,
  env: Readonly<Record<string, string | undefined>>,
): string | undefined {
  const dir = cacheDir(env);
  // airlock's own tree (from source, or as published: `.js`).
  if (dir === undefined || !/\/workers\/entry\.[jt]s$/.test(entry)) {
    return undefined;
  }
  const current = stamp(binary, entry);
  // One bundle per airlock tree and Bun binary; its stamp says what from.
  const name = `entry-${shortHash(`${binary}\0${entry}`)}`;
  const file = join(dir, `${name}.js`);
  const stampFile = join(dir, `${name}.stamp`);
  if (existsSync(file) && readText(stampFile) === current) return file;
  mkdirSync(dir, { recursive: true });
  const unique = Math.random().toString(36).slice(2);
  const partial = `${file}.${unique}.partial`;
  const partialStamp = `${stampFile}.${unique}.partial`;
  try {
    const result = spawnSync(
      binary,
      ["build", entry, "--target=bun", "--outfile", partial],
      {
        stdio: "ignore",
        env: { PATH: env.PATH ?? "/usr/bin:/bin", NO_COLOR: "1" },
        timeout: 60_000,
      },
    );
    if (result.status !== 0 || !existsSync(partial)) return undefined;
    // The stamp last: a bundle without its stamp is rebuilt.
    rmSync(stampFile, { force: true });
    renameSync(partial, file);
    writeFileSync(partialStamp, current);
    renameSync(partialStamp, stampFile);
    return file;
  } finally {
    rmSync(partial, { force: true });
    rmSync(partialStamp, { force: true });
  }
}

/**
 * The pre-bundled worker entry for Bun workers run by `binary`, building it
 * on first use.
 *
 * @param binary The Bun binary the workers run (real path).
 * @param entry The path of `workers/entry.ts`.
 * @param env The parent's environment (for the cache directory and PATH).
 * @returns The bundle's path, or `undefined` when workers must run `entry`
 *   itself.
 */
export function bunEntryBundle(
  binary: string,
  entry: string,
  env: Readonly<Record<string, string | undefined>>,
): string | undefined {
  const key = `${binary}\0${entry}`;
  if (bundles.has(key)) return bundles.get(key);
  let file: string | undefined;
  try {
    file = build(binary, entry, env);
  } catch {
    file = undefined;
  }
  bundles.set(key, file);
  return file;
}
