/**
 * The worker entry of Bun workers, pre-bundled: airlock's worker side
 * (`workers/entry.ts` and the ~20 modules it imports) built once into one
 * JavaScript file and cached, so a Bun worker does not transpile and link
 * those modules on every start. In the OS sandbox Bun runs without its
 * transpiler cache, where this halves the CPU a worker spends before it is
 * ready (see docs/benchmarks.md, (e)). The user's module is not bundled: it
 * is imported at run time as before.
 *
 * The bundle is keyed by the content of airlock's source and the Bun binary,
 * kept under `$XDG_CACHE_HOME/airlock/bun-entry` (or `~/.cache/…`), written
 * atomically, and built with the worker's own `bun build`. Where it cannot be
 * built (no cache directory, a read-only one, a failed build) workers run
 * `workers/entry.ts` itself, as before: slower, never less confined (the
 * bundle is mounted read-only like the rest of airlock's code).
 *
 * @module
 */

import {
  createHash,
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
} from "./node_builtins.ts";

/** Built or looked up once per process: key `binary\0entry`. */
const bundles = new Map<string, string | undefined>();

/** The source files whose content decides the bundle: all of airlock's code. */
function sources(root: string): string[] {
  const found: string[] = [];
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (/\.(ts|js)$/.test(name)) found.push(path);
    }
  };
  walk(join(root, "src"));
  found.push(join(root, "workers", "entry.ts"));
  return found;
}

function bundleKey(binary: string, entry: string): string {
  const hash = createHash("sha256");
  const bin = statSync(binary);
  hash.update(`${binary}\0${bin.size}\0${bin.mtimeMs}\0`);
  for (const path of sources(dirname(dirname(entry)))) {
    hash.update(path).update("\0").update(readFileSync(path)).update("\0");
  }
  return hash.digest("hex").slice(0, 32);
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
  if (dir === undefined || !entry.endsWith("/workers/entry.ts")) {
    return undefined;
  }
  const file = join(dir, `entry-${bundleKey(binary, entry)}.js`);
  if (existsSync(file)) return file;
  mkdirSync(dir, { recursive: true });
  const partial = `${file}.${Math.random().toString(36).slice(2)}.partial`;
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
    renameSync(partial, file);
    return file;
  } finally {
    rmSync(partial, { force: true });
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
