/**
 * The sandbox's probes, kept per machine (issue 23 item 2): a second
 * process of the same program on an unchanged machine runs neither
 * bubblewrap's probe nor the confine step's (a whole runtime start).
 *
 * What is kept: only answers that can never widen confinement. bubblewrap
 * "usable" (a wrong one adds a layer that then fails the start), and the
 * confine step's support when it is full: Landlock at ABI
 * {@linkcode FULL_LANDLOCK_ABI} or more and seccomp (a wrong one makes the
 * step ask the kernel for rights it lacks, and the step refuses to run the
 * worker). An answer that would narrow what the sandbox does (bubblewrap
 * unusable, no or an older Landlock, no seccomp) is never read from the
 * cache: it is probed again in every process, as without a cache. So even
 * a planted file can only make starts fail, never let a worker run with
 * less confinement or fall back to Deno's flags.
 *
 * Keyed by what the answers depend on: the kernel release, the probe's
 * command and environment, the identity (device, inode, size, change
 * times) of every file the command names, and of airlock's sandbox code
 * (the native step's program included).
 *
 * Where: `$XDG_CACHE_HOME/airlock` (else `~/.cache/airlock`), mode 0700,
 * under the location rules of the code cache: the directory and the file
 * must be this user's, writable by no one else, the file no link, and no
 * worker of this process may be granted write on them (then the cache is
 * neither read nor written). A start that fails in a sandbox wrapper forgets
 * the kept answers ({@linkcode forgetMachineProbes}, and facts.ts those it
 * read): the next start probes again.
 *
 * @module
 */

import {
  fileURLToPath,
  join,
  lstatSync,
  mkdirSync,
  osRelease,
  process,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "../node_builtins.ts";
import { writableByWorker } from "../launch/executable.ts";
import { readPrivateFile } from "../private_file.ts";
import type { Steps } from "../turns.ts";

/** The lowest Landlock ABI a kept answer may claim: the highest airlock's rules use (scopes). */
export const FULL_LANDLOCK_ABI = 6;

/** The cache file's name (its format's version in it). */
const FILE = "probes-v1.json";

/** At most this many answers are kept (the most recent). */
const MAX_ENTRIES = 32;

/** A file longer than this is not read (32 answers take ~10 KB). */
const MAX_FILE_BYTES = 1024 * 1024;

/** What a probe ran: its argv, environment and working directory. */
export interface ProbeIdentity {
  /** The probe's command line. */
  argv: readonly string[];
  /** Its environment. */
  env: Readonly<Record<string, string>>;
  /** Its working directory, if set. */
  cwd?: string;
  /** What it reads on stdin, if anything (the native step's program). */
  input?: Uint8Array;
}

/** airlock's sandbox code, whose change changes the answers' key. */
const AIRLOCK_FILES: readonly URL[] = [
  new URL(import.meta.url),
  new URL("./step.ts", import.meta.url),
  new URL("./step_libc.ts", import.meta.url),
  new URL("./facts.ts", import.meta.url),
  new URL("./native_step.ts", import.meta.url),
  new URL("./native/confine_x64.ts", import.meta.url),
  new URL("./native/confine_arm64.ts", import.meta.url),
];

/**
 * A file's identity: device, inode, size and change times; `-` when
 * missing, `+` for what is not a file (a directory's times change with
 * every entry made in it: `/tmp` in bubblewrap's probe).
 */
function identity(path: string): string {
  try {
    const stat = statSync(path);
    if (!stat.isFile()) return "+";
    return `${stat.dev}:${stat.ino}:${stat.size}:${stat.mtimeMs}:${stat.ctimeMs}`;
  } catch {
    return "-";
  }
}

/** The kernel's release, or `undefined` when it cannot be read (Deno without `--allow-sys` nor a read grant on `/proc`). */
function kernelRelease(): string | undefined {
  try {
    return osRelease();
  } catch {
    try {
      return readFileSync("/proc/sys/kernel/osrelease", "utf8").trim();
    } catch {
      return undefined;
    }
  }
}

/**
 * The key of a probe's answer: `undefined` (nothing is kept) when the
 * kernel's release cannot be read. In steps (`turns.ts`): a turn may come
 * between the files it stats (a first start's first `stat`s are slow).
 *
 * @param kind What was probed.
 * @param probe The probe's command.
 * @returns The steps; their result is the key.
 */
export function* probeKeySteps(
  kind: string,
  probe: ProbeIdentity,
): Steps<string | undefined> {
  const kernel = kernelRelease();
  if (kernel === undefined) return undefined;
  const paths = [
    ...probe.argv.filter((arg) => arg.startsWith("/")),
    ...AIRLOCK_FILES.map((url) =>
      url.protocol === "file:" ? fileURLToPath(url) : url.href
    ),
  ];
  const identities: string[] = [];
  for (const path of paths) {
    yield;
    identities.push(path.startsWith("/") ? identity(path) : path);
  }
  const files = identities.length - AIRLOCK_FILES.length;
  return JSON.stringify([
    kind,
    kernel,
    probe.argv,
    probe.env,
    probe.cwd ?? null,
    // airlock's own program (the native step's): its files' identity
    // below stands for its bytes (hashing them would cost the first start
    // ~20 ms of one block).
    probe.input?.length ?? null,
    identities.slice(0, files),
    identities.slice(files),
  ]);
}

/** This process's effective uid (`undefined` where there is none). */
function euid(): number | undefined {
  try {
    return process.effectiveUid();
  } catch {
    return undefined;
  }
}

/** Whether a path is this user's and writable by no one else. */
function ownPrivate(
  stat: { uid: number; mode: number },
  uid: number,
): boolean {
  return stat.uid === uid && (stat.mode & 0o022) === 0;
}

/**
 * The cache directory (real path), made if need be, when it may be used:
 * `undefined` otherwise.
 */
function cacheDir(create: boolean): string | undefined {
  const uid = euid();
  if (uid === undefined) return undefined;
  let xdg: string | undefined;
  let home: string | undefined;
  try {
    xdg = process.env.XDG_CACHE_HOME;
    home = process.env.HOME;
  } catch {
    return undefined; // No access to the environment (Deno without --allow-env).
  }
  const base = xdg !== undefined && xdg.startsWith("/")
    ? xdg
    : home !== undefined && home.startsWith("/")
    ? join(home, ".cache")
    : undefined;
  if (base === undefined) return undefined;
  const dir = join(base, "airlock");
  try {
    if (writableByWorker(dir) !== undefined) return undefined;
    if (create) mkdirSync(dir, { recursive: true, mode: 0o700 });
    const real = realpathSync(dir);
    const stat = lstatSync(real);
    if (!stat.isDirectory() || !ownPrivate(stat, uid)) return undefined;
    // A worker of this process that may write there could plant answers.
    if (writableByWorker(real) !== undefined) return undefined;
    return real;
  } catch {
    return undefined;
  }
}

/** The kept answers, by key (empty when there is no usable file). */
function readAll(dir: string): Record<string, unknown> {
  const uid = euid();
  const file = join(dir, FILE);
  if (uid === undefined) return {};
  // Opened once, no link followed, checked and read through that
  // descriptor (a file swapped after a check by path could be a FIFO, or
  // a link to /dev/zero), and bounded.
  const text = readPrivateFile(file, MAX_FILE_BYTES, uid);
  if (text === undefined) return {};
  try {
    const parsed = JSON.parse(text) as unknown;
    return typeof parsed === "object" && parsed !== null &&
        !Array.isArray(parsed)
      ? parsed as Record<string, unknown>
      : {};
  } catch {
    return {};
  }
}

/** Whether an answer may come from the cache (see the module's doc). */
function widensNothing(kind: string, value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const answer = value as Record<string, unknown>;
  if (kind === "bwrap") return answer.usable === true;
  if (kind === "step") {
    return typeof answer.landlockAbi === "number" &&
      Number.isInteger(answer.landlockAbi) &&
      answer.landlockAbi >= FULL_LANDLOCK_ABI && answer.seccomp === true &&
      answer.error === undefined;
  }
  return false;
}

/**
 * A probe's answer kept on this machine, if there is one that may be used.
 *
 * @param kind `"bwrap"` or `"step"`.
 * @param key From {@linkcode probeKeySteps}.
 * @returns The answer, or `undefined` (probe it).
 */
export function machineProbe(
  kind: string,
  key: string | undefined,
): unknown {
  if (key === undefined) return undefined;
  const dir = cacheDir(false);
  if (dir === undefined) return undefined;
  const entry = readAll(dir)[key];
  const value = typeof entry === "object" && entry !== null
    ? (entry as { value?: unknown }).value
    : undefined;
  return widensNothing(kind, value) ? value : undefined;
}

/**
 * Keeps a probe's answer on this machine, when it is one that may be read
 * back (others are not written). Never throws: a cache that cannot be
 * written only means the next process probes again.
 *
 * @param kind `"bwrap"` or `"step"`.
 * @param key From {@linkcode probeKeySteps}.
 * @param value The answer.
 */
export function keepMachineProbe(
  kind: string,
  key: string | undefined,
  value: unknown,
): void {
  if (key === undefined || !widensNothing(kind, value)) return;
  const dir = cacheDir(true);
  if (dir === undefined) return;
  const entries = readAll(dir);
  delete entries[key];
  entries[key] = { value, at: Date.now() };
  const keys = Object.keys(entries);
  for (const old of keys.slice(0, Math.max(0, keys.length - MAX_ENTRIES))) {
    delete entries[old];
  }
  const file = join(dir, FILE);
  const temporary = `${file}.${crypto.randomUUID()}`;
  try {
    // "wx": never through a file or link that is already there.
    writeFileSync(temporary, JSON.stringify(entries), {
      mode: 0o600,
      flag: "wx",
    });
    renameSync(temporary, file);
  } catch {
    try {
      rmSync(temporary, { force: true });
    } catch {
      // Nothing more to do.
    }
  }
}

/**
 * Forgets the answers kept on this machine (a start failed in a sandbox
 * wrapper: one of them may be stale), so that the next process probes.
 */
export function forgetMachineProbes(): void {
  const dir = cacheDir(false);
  if (dir !== undefined) {
    try {
      rmSync(join(dir, FILE), { force: true });
    } catch {
      // Left: its answers can only fail starts, never weaken them.
    }
  }
}
