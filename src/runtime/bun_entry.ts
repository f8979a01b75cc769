/**
 * The worker entry of Bun workers, pre-bundled: airlock's worker side
 * (`workers/entry.ts` and the ~20 modules it imports) built into one
 * JavaScript file, so a Bun worker does not transpile and link those modules
 * on every start. In the OS sandbox Bun runs without its transpiler cache,
 * where this halves the CPU a worker spends before it is ready (see
 * docs/benchmarks.md, (e)). The user's module is not bundled: it is imported
 * at run time as before.
 *
 * Built ahead, at development time: `workers/entry_bundle.js`, checked into
 * airlock's tree by scripts/build_bun_entry.ts with the pinned Bun, its
 * SHA-256 and those of its sources a generated constant
 * (`_bun_entry_bundle.ts`). A parent uses it (the first Bun worker of a
 * process included, and without a build) when the sources beside the entry
 * still hash to what is recorded and the bundle to its hash, checked once
 * per process. It lies in airlock's own tree, read-only to workers and
 * trusted as `workers/entry.ts` is (whoever may write one may write the
 * other). It is plain JavaScript (`--target=bun`): any Bun that runs the
 * sources runs it.
 *
 * Otherwise (a vendored, edited copy; airlock as published to npm, whose
 * entry is `.js`; {@linkcode BUILD_BUN_ENTRY_ENV}) it is built once per
 * parent process and Bun binary (the worker's own
 * `bun build`, 0.04 to 0.1 s, in the background from the first Bun worker's
 * start: that worker, and any started before the build ends, runs
 * `workers/entry.ts` itself) into a private directory of this process
 * (`mkdtemp` under the temporary directory, mode 0700, removed when the
 * process exits), never into a cache shared between processes: a bundle
 * kept in `~/.cache` could be rewritten by a worker of any later program
 * granted write there, and no mark stored beside it can prove otherwise.
 * The parent keeps the bundle's SHA-256 in memory and checks the file
 * against it before every worker start (hashing it again whenever its
 * inode, size, mtime or ctime changed); a bundle that changed (or lies where
 * a worker of this process may write, see launch/command.ts) is not used
 * again, and workers run `workers/entry.ts` itself: slower, never less
 * confined (the bundle is mounted read-only like the rest of airlock's code).
 * A worker runs the bundle through `workers/bun_loader.ts`, given the hash:
 * the loader reads the file once, checks those bytes and runs them from
 * memory, so a bundle rewritten between the parent's check and the worker's
 * read is refused, never run.
 * Where it cannot be built (no temporary directory, a failed build) workers
 * run `workers/entry.ts` too.
 *
 * @module
 */

import {
  createHash,
  join,
  loadSpawnBuiltins,
  mkdirSync,
  mkdtempSync,
  process,
  readFileSync,
  rmSync,
  spawn,
  statSync,
  tmpdir,
  writeFileSync,
} from "./node_builtins.ts";
import { nextTurn } from "./turns.ts";
import { readPrivateBytes } from "./private_file.ts";
import { BUN_ENTRY_BUNDLE } from "./_bun_entry_bundle.ts";

/** A built bundle and the SHA-256 of what was built. */
export interface BunEntryBundle {
  /** The bundle's path. */
  file: string;
  /** The SHA-256 (hex) of the bytes built, kept in the parent's memory. */
  sha256: string;
}

/** A bundle being built, or the outcome (`undefined`: not usable). */
type BundleState =
  | { building: Promise<void>; keepAlive: () => void }
  | { built: BunEntryBundle | undefined };

/** Built once per process: key `binary\0entry`. */
const bundles = new Map<string, BundleState>();

/** This process's private directory, created on first use. */
let privateDir: string | undefined;

/** Builds still running, killed when this process exits. */
const builders = new Set<{ kill(signal: "SIGKILL"): unknown }>();

/**
 * The flags of every build of the bundle (the checked-in one's too:
 * scripts/build_bun_entry.ts). Minified, names kept (for stacks and error
 * names): its import costs a Bun worker less CPU.
 */
export const BUN_BUILD_FLAGS: readonly string[] = [
  "--target=bun",
  "--minify",
  "--keep-names",
];

/** How long a build may take before it is given up, in ms. */
const BUILD_TIMEOUT_MS = 60_000;

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

/** The members of Bun's native hasher used here. */
interface BunHasher {
  CryptoHasher: new (algorithm: "sha256") => {
    update(data: Uint8Array): unknown;
    digest(encoding: "hex"): string;
  };
}

/**
 * The SHA-256 of a bundle, in hex: Bun's native hasher on a Bun parent
 * (`node:crypto`'s first load would hold its first start in one block),
 * `node:crypto` on a Deno parent starting Bun workers (for ~50 KB its load
 * and hash cost less than airlock's own SHA-256, whose JavaScript is slow on
 * large inputs).
 */
function sha256(bytes: Uint8Array): string {
  const bun = (globalThis as { Bun?: BunHasher }).Bun;
  if (bun === undefined) {
    return createHash("sha256").update(bytes).digest("hex");
  }
  const hasher = new bun.CryptoHasher("sha256");
  hasher.update(bytes);
  return hasher.digest("hex");
}

function directory(onExit: (callback: () => void) => void): string {
  if (privateDir === undefined) {
    // mkdtemp creates the directory with mode 0700, under a new name.
    const created = mkdtempSync(join(tmpdir(), "airlock-"));
    privateDir = created;
    onExit(() => {
      // A build still running would write into the removed directory.
      for (const builder of builders) builder.kill("SIGKILL");
      try {
        rmSync(created, { recursive: true, force: true });
      } catch {
        // Exiting anyway.
      }
    });
  }
  const dir = join(privateDir, "bun-entry");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}

/** The most bytes a bundle may have (it is ~50 KB): past it, not built. */
const MAX_BUNDLE_BYTES = 16 * 1024 * 1024;

/**
 * Builds the bundle in a child process (the worker's own `bun build`), which
 * neither blocks this process nor keeps it alive.
 *
 * The build prints the bundle to its stdout: the hash is taken of the bytes
 * this process read from the pipe, and only then are they written, to a new
 * file (`O_CREAT | O_EXCL`, mode 0600, under a name not used before). Built
 * into a file by `bun build` and hashed from there, the bytes could be
 * rewritten in between by any process of this user granted write on the
 * temporary directory (a worker of another airlock program), and the parent
 * would have trusted them. It runs in the private directory with
 * `--config=/dev/null`: a `bunfig.toml` in the parent's working directory
 * (which a worker granted write on the project could plant) would
 * otherwise shape airlock's worker code (its `[define]`, `[loader]`).
 */
async function build(
  binary: string,
  entry: string,
  env: Readonly<Record<string, string | undefined>>,
  onExit: (callback: () => void) => void,
  started: (child: { ref(): void }) => void,
): Promise<BunEntryBundle | undefined> {
  // airlock's own tree (from source, or as published: `.js`).
  if (!/\/workers\/entry\.[jt]s$/.test(entry)) return undefined;
  // Not in the start's turn: `node:child_process`'s first load and the
  // spawn each get a turn of their own (issue 23 item 4).
  await nextTurn();
  await loadSpawnBuiltins();
  const dir = directory(onExit);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const code = await new Promise<number | null>((resolve) => {
    const child = spawn(
      binary,
      ["--config=/dev/null", "build", entry, ...BUN_BUILD_FLAGS],
      {
        cwd: dir,
        stdio: ["ignore", "pipe", "ignore"],
        env: { PATH: env.PATH ?? "/usr/bin:/bin", NO_COLOR: "1" },
      },
    );
    builders.add(child);
    const stdout = child.stdout as
      | (NonNullable<typeof child.stdout> & {
        ref?: () => void;
        unref?: () => void;
      })
      | null;
    child.unref();
    stdout?.unref?.();
    started({
      ref() {
        child.ref();
        stdout?.ref?.();
      },
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), BUILD_TIMEOUT_MS);
    (timer as { unref?: () => void }).unref?.();
    stdout?.on("data", (chunk: Uint8Array) => {
      size += chunk.byteLength;
      if (size > MAX_BUNDLE_BYTES) child.kill("SIGKILL");
      else chunks.push(chunk);
    });
    const done = (status: number | null): void => {
      clearTimeout(timer);
      builders.delete(child);
      resolve(status);
    };
    child.once("error", () => done(null));
    // "close": the exit, and stdout read to its end.
    child.once("close", (status) => done(status));
  });
  if (code !== 0 || size === 0 || size > MAX_BUNDLE_BYTES) return undefined;
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  const file = join(
    dir,
    `entry-${shortHash(`${binary}\0${entry}`)}${
      crypto.randomUUID().replaceAll("-", "")
    }.js`,
  );
  try {
    // O_CREAT | O_EXCL: a file (or link) put there first is never written
    // through, and the build is not used.
    writeFileSync(file, bytes, { flag: "wx", mode: 0o600 });
  } catch {
    return undefined;
  }
  return { file, sha256: sha256(bytes) };
}

/** Starts the build for `key`, recording its outcome when it ends. */
function startBuild(
  key: string,
  binary: string,
  entry: string,
  env: Readonly<Record<string, string | undefined>>,
  onExit: (callback: () => void) => void,
): BundleState {
  const record = (built: BunEntryBundle | undefined): void => {
    bundles.set(key, { built });
  };
  let child: { ref(): void } | undefined;
  let wanted = false;
  const state: BundleState = {
    building: build(binary, entry, env, onExit, (started) => {
      child = started;
      if (wanted) started.ref();
    }).then(record, () => record(undefined)),
    // Someone awaits the build: it keeps this process alive until it ends.
    keepAlive: () => {
      wanted = true;
      child?.ref();
    },
  };
  bundles.set(key, state);
  return state;
}

/**
 * The file's identity and last change (device, inode, size, mtime, ctime),
 * as recorded when its bytes were last hashed here: `file` to stamp.
 */
const verified = new Map<string, { stamp: string; at: number }>();

/**
 * How long a kept stamp is trusted before the bytes are hashed again, in ms
 * (a change through a shared mapping keeps the stamp: it is caught within
 * this, and the bundle is not given again).
 */
const REHASH_EVERY_MS = 1_000;

/**
 * How old a file's last change must be for its stamp to be kept, in ms:
 * file times tick coarsely (a clock tick), so a second change within the
 * tick of the first could leave the same stamp.
 */
const SETTLED_MS = 1_000;

function stampOf(file: string): { stamp: string; settled: boolean } {
  const stat = statSync(file);
  return {
    stamp:
      `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`,
    settled: Date.now() - stat.ctimeMs > SETTLED_MS,
  };
}

/**
 * Whether the file still holds exactly what was built. Hashed again only
 * when its stamp changed since the last hash: a write changes its mtime and
 * ctime (which no process can set back without changing the system clock),
 * a replacement its inode; a stamp is kept only once the last change is
 * older than a clock tick. Not every write: stores through a shared mapping
 * made writable before the hash leave the times alone, so a process able to
 * write the file can keep a changed bundle looking intact here, so a kept
 * stamp is trusted for {@linkcode REHASH_EVERY_MS} at most. This check
 * only chooses between the bundle and the entry itself; what keeps a
 * changed bundle from running is the loader, which hashes the very bytes it
 * runs against the parent's hash and refuses others (that start fails).
 */
function isPrivate(file: string): boolean {
  return privateDir !== undefined && file.startsWith(`${privateDir}/`);
}

/** This process's effective uid (-1, owner of nothing, where there is none). */
function ownUid(): number {
  try {
    return process.effectiveUid() ?? -1;
  } catch {
    return -1;
  }
}

function intact(built: BunEntryBundle): boolean {
  try {
    const { stamp, settled } = stampOf(built.file);
    const now = Date.now();
    const kept = verified.get(built.file);
    if (
      kept !== undefined && kept.stamp === stamp &&
      now - kept.at < REHASH_EVERY_MS
    ) return true;
    // One this process built lies in its private directory, which a worker
    // of another program granted write on the temporary directory may
    // still write: read without following a link or blocking (a FIFO put
    // in its place held the parent), this user's, bounded.
    const bytes = isPrivate(built.file)
      ? readPrivateBytes(built.file, MAX_BUNDLE_BYTES, ownUid())
      : readFileSync(built.file);
    if (bytes === undefined || sha256(bytes) !== built.sha256) return false;
    // Stamped before reading: a write during the read changes the stamp.
    if (settled) verified.set(built.file, { stamp, at: now });
    return true;
  } catch {
    return false;
  }
}

/**
 * With this variable `1` in the parent's environment, the checked-in bundle
 * is not used: Bun workers run a bundle built by this process, as where the
 * checked-in one does not match (tests of that path, A/B runs). It can only
 * choose the other, equally confined, path.
 */
export const BUILD_BUN_ENTRY_ENV = "AIRLOCK_BUILD_BUN_ENTRY";

/**
 * The checked-in bundle by entry, once looked at (`undefined`: not usable),
 * or its check still running (a Deno parent's).
 */
const checkedIn = new Map<
  string,
  BunEntryBundle | undefined | Promise<unknown>
>();

/** WebCrypto's SHA-256 of `bytes`, in hex (native and asynchronous). */
async function digestHex(bytes: Uint8Array<ArrayBuffer>): Promise<string> {
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  return Array.from(digest, (byte) => byte.toString(16).padStart(2, "0"))
    .join("");
}

/**
 * The bundle checked into airlock's tree (scripts/build_bun_entry.ts), when
 * it is the one this copy of airlock's sources builds: `entry` is
 * `workers/entry.ts` of a source tree (not the published `.js`), every
 * source it was built from hashes to what is recorded (a vendored, edited
 * copy builds its own), and its bytes to the recorded SHA-256. Looked at
 * once per process (about 30 files, ~290 KB): at once on a Bun parent (1 to
 * 2 ms with Bun's native hasher); on a Deno parent in the background with
 * WebCrypto's digest, a file a turn (`node:crypto`'s load and hash would
 * hold its first start ~20 ms, airlock's own SHA-256 70 to 100 ms), the
 * workers started meanwhile running `workers/entry.ts` itself. It lies in
 * airlock's tree, trusted as the entry itself is (whoever may write one may
 * write the other); the worker's loader checks its bytes against the
 * recorded hash all the same.
 *
 * @returns The bundle, or `undefined` (not usable, or still being checked:
 *   {@linkcode checkingBundle}).
 */
function checkedInBundle(entry: string): BunEntryBundle | undefined {
  const known = checkedIn.get(entry);
  if (known instanceof Promise) return undefined;
  if (checkedIn.has(entry)) return known;
  checkedIn.set(entry, undefined);
  const suffix = "/workers/entry.ts";
  if (!entry.endsWith(suffix)) return undefined;
  const root = entry.slice(0, -suffix.length);
  const file = join(root, BUN_ENTRY_BUNDLE.file);
  const bundle = { file, sha256: BUN_ENTRY_BUNDLE.sha256 };
  const all = [
    ...BUN_ENTRY_BUNDLE.sources,
    [BUN_ENTRY_BUNDLE.file, BUN_ENTRY_BUNDLE.sha256] as const,
  ];
  if ((globalThis as { Bun?: unknown }).Bun !== undefined) {
    try {
      for (const [path, expected] of all) {
        if (sha256(readFileSync(join(root, path))) !== expected) {
          return undefined;
        }
      }
    } catch {
      return undefined; // Missing or unreadable: built as before.
    }
    checkedIn.set(entry, bundle);
    return bundle;
  }
  const check = async (): Promise<BunEntryBundle | undefined> => {
    for (const [path, expected] of all) {
      const bytes = new Uint8Array(readFileSync(join(root, path)));
      if (await digestHex(bytes) !== expected) return undefined;
    }
    return bundle;
  };
  checkedIn.set(
    entry,
    check().then(
      (checked) => checkedIn.set(entry, checked),
      () => checkedIn.set(entry, undefined),
    ),
  );
  return undefined;
}

/** The check of the checked-in bundle for `entry` while it runs, if it does. */
function checkingBundle(entry: string): Promise<unknown> | undefined {
  const known = checkedIn.get(entry);
  return known instanceof Promise ? known : undefined;
}

/**
 * The pre-bundled worker entry for Bun workers run by `binary`, checked
 * against the hash kept in memory. The first call in this process starts the
 * build in the background and returns `undefined` (that worker, and any
 * started before the build ends, runs `entry` itself, at a little more CPU,
 * where a synchronous build held this process in one long block).
 *
 * @param binary The Bun binary the workers run (real path).
 * @param entry The path of `workers/entry.ts`.
 * @param env The parent's environment (for `PATH`).
 * @param onExit Registers a callback run when this process exits (the
 *   private directory is removed then, a build still running killed).
 * @returns The bundle's path and hash (workers run it through
 *   `workers/bun_loader.ts`, which checks the bytes it runs against the
 *   hash), or `undefined` when workers must run `entry` itself (not built
 *   yet, it could not be built, or it changed since it was built).
 */
export function bunEntryBundle(
  binary: string,
  entry: string,
  env: Readonly<Record<string, string | undefined>>,
  onExit: (callback: () => void) => void,
): BunEntryBundle | undefined {
  if (env[BUILD_BUN_ENTRY_ENV] !== "1") {
    const ready = checkedInBundle(entry);
    if (ready !== undefined) {
      if (intact(ready)) return ready;
      // Someone wrote it: never again in this process; built as before.
      checkedIn.set(entry, undefined);
    }
    // Still being checked (a Deno parent): no build unless it does not match.
    if (checkingBundle(entry) !== undefined) return undefined;
  }
  const key = `${binary}\0${entry}`;
  const state = bundles.get(key) ??
    startBuild(key, binary, entry, env, onExit);
  if (!("built" in state) || state.built === undefined) return undefined;
  if (!intact(state.built)) {
    // Someone wrote it: never again in this process.
    bundles.set(key, { built: undefined });
    return undefined;
  }
  return state.built;
}

/**
 * {@linkcode bunEntryBundle} once its build (started now if need be) has
 * ended.
 *
 * @param binary The Bun binary the workers run (real path).
 * @param entry The path of `workers/entry.ts`.
 * @param env The parent's environment (for `PATH`).
 * @param onExit Registers a callback run when this process exits.
 * @returns What {@linkcode bunEntryBundle} gives then.
 */
export async function builtBunEntryBundle(
  binary: string,
  entry: string,
  env: Readonly<Record<string, string | undefined>>,
  onExit: (callback: () => void) => void,
): Promise<BunEntryBundle | undefined> {
  if (env[BUILD_BUN_ENTRY_ENV] !== "1") {
    checkedInBundle(entry);
    await checkingBundle(entry);
    const ready = checkedInBundle(entry);
    if (ready !== undefined && intact(ready)) return ready;
  }
  const key = `${binary}\0${entry}`;
  const state = bundles.get(key) ??
    startBuild(key, binary, entry, env, onExit);
  if ("building" in state) {
    state.keepAlive();
    await state.building;
  }
  return bunEntryBundle(binary, entry, env, onExit);
}
