/**
 * Shared test helpers: fixture URLs, quiet log sinks, deadlines, typed
 * rejections, scratch directories, runtime-only tests, tests that need a
 * system tool, and the check that no process a test spawned outlives its file.
 *
 * @module
 */

import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  accessSync,
  constants as fsConstants,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, isAbsolute, join } from "node:path";
import { inspect } from "node:util";
import process from "node:process";
import type { LogSource } from "../mod.ts";
import { assertNoWorkers, liveWorkers } from "../testing.ts";
import { probeConfineSupport } from "../src/runtime/sandbox/facts.ts";

/**
 * The Deno cache directory of the test processes (and what they spawn): a
 * directory of this user's under the temporary directory, kept from one run
 * to the next, so that sandboxed Deno workers' private code caches
 * (`<DENO_DIR>/airlock-code`) never fill the user's own cache. Another
 * user's directory at that path is never used (a fresh one instead).
 */
function testDenoDir(): string {
  const uid = process.getuid?.() ?? 0;
  const root = join(tmpdir(), `airlock-test-cache-${uid}`);
  try {
    mkdirSync(root, { mode: 0o700 });
  } catch {
    // There already.
  }
  try {
    const stat = lstatSync(root);
    if (stat.isDirectory() && stat.uid === uid && (stat.mode & 0o022) === 0) {
      return join(root, "deno");
    }
  } catch {
    // Not usable: a fresh one below.
  }
  return join(mkdtempSync(join(tmpdir(), "airlock-test-cache-")), "deno");
}
process.env.DENO_DIR = testDenoDir();

/** The runtime running the tests. */
export const RUNTIME: "deno" | "bun" =
  typeof (globalThis as { Bun?: unknown }).Bun === "object" ? "bun" : "deno";

/** The other runtime. */
export const OTHER_RUNTIME: "deno" | "bun" = RUNTIME === "bun" ? "deno" : "bun";

/**
 * The URL of a fixture module.
 *
 * @param name File name under tests/fixtures/.
 * @returns Its URL.
 */
export function fixture(name: string): URL {
  return new URL(`./fixtures/${name}`, import.meta.url);
}

/** A log sink that keeps lines instead of printing them. */
export interface LogCapture {
  /** The sink to pass as `onStderr`. */
  onStderr: (line: string, source: LogSource) => void;
  /** The lines so far. */
  lines: string[];
}

/**
 * A log sink that keeps the worker's stderr lines.
 *
 * @returns The capture.
 */
export function captureLog(): LogCapture {
  const lines: string[] = [];
  const capture = { onStderr: (line: string) => void lines.push(line) };
  // Not enumerable: `{ ...captureLog() }` spreads into options, which refuse
  // unknown keys.
  Object.defineProperty(capture, "lines", { value: lines, enumerable: false });
  return capture as unknown as LogCapture;
}

/**
 * Rejects if `promise` has not settled within `ms`.
 *
 * @param promise What to wait for.
 * @param ms The deadline.
 * @param what What it is, for the failure message.
 * @returns The promise's value.
 */
export function within<T>(
  promise: Promise<T>,
  ms: number,
  what: string,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new Error(`Deadline: ${what} did not settle within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Waits until `check` returns true, polling, under a deadline.
 *
 * @param check The condition.
 * @param ms The deadline.
 * @param what What is awaited, for the failure message.
 */
export async function until(
  check: () => boolean | Promise<boolean>,
  ms: number,
  what: string,
): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`Deadline: ${what} within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Whether a process is alive (and not a zombie).
 *
 * @param pid The process.
 * @returns Whether it runs.
 */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/**
 * The live child processes of this test process.
 *
 * @returns Their pids and command lines.
 */
export function liveChildren(): { pid: number; cmdline: string }[] {
  const own = process.pid;
  const found: { pid: number; cmdline: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) !== own) continue;
      if (fields[0] === "Z" || fields[0] === "X") continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8")
        .split("\0").join(" ").slice(0, 200);
      found.push({ pid: Number(entry), cmdline });
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/**
 * Fails the file if any child process is still alive once its tests are done
 * (after a short grace for exits in progress), or airlock still counts a
 * worker as live (the test kit's `assertNoWorkers()`), and kills the
 * survivors.
 *
 * The check runs as a test registered after the file's own tests (from a
 * microtask, once the module body has registered them): Deno ignores a
 * failing top-level `after()` hook. The same check in `after()` remains for
 * what a file with top-level `await` registers after that test.
 */
export function checkNoLeaks(): void {
  const check = async () => {
    const end = Date.now() + 3_000;
    let left = liveChildren();
    while (
      (left.length > 0 || liveWorkers().length > 0) && Date.now() < end
    ) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      left = liveChildren();
    }
    for (const child of left) {
      try {
        process.kill(child.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    assert.deepEqual(
      left,
      [],
      "processes outlived the tests that spawned them",
    );
    assertNoWorkers();
  };
  queueMicrotask(() =>
    test("no process or worker outlives the tests of this file", check)
  );
  after(check);
}

/**
 * A test that runs only on one runtime (and is reported as skipped on the
 * other).
 *
 * @param runtime Where it runs.
 * @param name The test's name.
 * @param fn The test.
 */
export function testOn(
  runtime: "deno" | "bun",
  name: string,
  fn: () => Promise<void> | void,
): void {
  if (RUNTIME === runtime) test(name, fn);
  else test(`${name} (${runtime} only)`, { skip: true }, () => {});
}

// deno-lint-ignore no-explicit-any
type ErrorClass<E extends Error> = abstract new (...args: any[]) => E;

/**
 * Awaits a promise that must reject with an instance of `errorClass`, and
 * returns that error so the test can assert its fields.
 *
 * @param promise The promise, or a function returning one (a synchronous
 * throw of the function counts as a rejection).
 * @param errorClass The class the error must be an instance of.
 * @returns The error.
 * @throws {assert.AssertionError} when the promise resolves, or rejects with
 * something else (the actual error is the assertion's `actual` and `cause`).
 *
 * @example
 * ```ts ignore
 * const error = await rejection(s.call("boom", []), RemoteError);
 * assert.equal(error.remoteName, "TypeError");
 * ```
 */
export async function rejection<E extends Error>(
  promise: Promise<unknown> | (() => unknown),
  errorClass: ErrorClass<E>,
): Promise<E> {
  let value: unknown;
  try {
    value = await (typeof promise === "function" ? promise() : promise);
  } catch (error: unknown) {
    if (error instanceof errorClass) return error;
    const failure = new assert.AssertionError({
      message: `Expected a rejection with ${errorClass.name}, got ${
        inspect(error, { depth: 2 })
      }`,
      actual: error,
      expected: errorClass,
      operator: "instanceof",
    });
    failure.cause = error;
    throw failure;
  }
  throw new assert.AssertionError({
    message:
      `Expected a rejection with ${errorClass.name}, but it resolved with ${
        inspect(value, { depth: 2 })
      }`,
    actual: value,
    expected: errorClass,
    operator: "rejects",
  });
}

/** A temporary directory that is removed when disposed. */
export interface ScratchDir {
  /** Its absolute path. */
  readonly path: string;
  /**
   * A path inside it.
   *
   * @param parts Path segments below the directory.
   * @returns The joined absolute path.
   */
  join(...parts: string[]): string;
  /** Removes it and everything in it (idempotent). */
  [Symbol.dispose](): void;
}

/**
 * A fresh temporary directory for one test, removed with everything in it
 * when the test's `using` scope ends.
 *
 * @param name A short name for the directory (it shows in its path).
 * @returns The directory.
 *
 * @example
 * ```ts ignore
 * test("writes a file", () => {
 *   using dir = scratchDir("writes");
 *   writeFileSync(dir.join("a.txt"), "x");
 * });
 * ```
 */
export function scratchDir(name = "test"): ScratchDir {
  const path = mkdtempSync(join(tmpdir(), `airlock-${name}-`));
  return {
    path,
    join: (...parts: string[]) => join(path, ...parts),
    [Symbol.dispose]() {
      rmSync(path, { recursive: true, force: true });
    },
  };
}

/** A system tool that some tests need and a fresh machine may lack. */
export type Tool =
  | "bwrap"
  | "setpriv"
  | "sshd"
  | "cc"
  | "python3"
  | "postgres"
  | "landlock";

/** What each tool is and how to install it (Debian package names). */
const TOOLS: Record<Tool, { what: string; install: string }> = {
  bwrap: {
    what: 'bubblewrap ("bwrap", the OS sandbox)',
    install: "apt-get install bubblewrap",
  },
  setpriv: {
    what: '"setpriv" (kills workers with their parent)',
    install: "apt-get install util-linux",
  },
  sshd: {
    what: "an OpenSSH server (sshd, for the launcher tests)",
    install: "apt-get install openssh-server",
  },
  postgres: {
    what: "PostgreSQL (initdb and postgres, for the network-grant tests)",
    install: "apt-get install postgresql",
  },
  cc: {
    what: 'a C compiler ("cc")',
    install: "apt-get install gcc",
  },
  python3: {
    what: "Python 3.9 or newer (python3, or $AIRLOCK_PYTHON)",
    install: "apt-get install python3",
  },
  landlock: {
    what:
      "Landlock ABI 6 or newer with seccomp (the OS sandbox without bubblewrap)",
    install: "run Linux 6.12 or later with landlock in the lsm= boot parameter",
  },
};

/**
 * The environment variable that turns a missing tool from a skip into a
 * failure. `.ci/run` sets it, so CI proves everything.
 */
export const REQUIRE_TOOLS_ENV = "AIRLOCK_REQUIRE_TOOLS";

function onPath(name: string): boolean {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue;
    try {
      accessSync(join(dir, name), fsConstants.X_OK);
      if (statSync(join(dir, name)).isFile()) return true;
    } catch {
      // Not here.
    }
  }
  return false;
}

function probe(tool: Tool): boolean {
  switch (tool) {
    case "python3":
      try {
        execFileSync(process.env.AIRLOCK_PYTHON || "python3", [
          "-c",
          "import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)",
        ], { stdio: "ignore", timeout: 30_000 });
        return true;
      } catch {
        return false;
      }
    case "sshd":
      return onPath("sshd") || isExecutable("/usr/sbin/sshd");
    case "postgres":
      return postgresBin() !== undefined;
    case "landlock": {
      if (process.platform !== "linux") return false;
      const support = probeConfineSupport(
        { runtime: RUNTIME, binary: realpathSync(process.execPath) },
        {
          PATH: process.env.PATH ?? "/usr/bin:/bin",
          ...(process.env.HOME ? { HOME: process.env.HOME } : {}),
          ...(process.env.DENO_DIR ? { DENO_DIR: process.env.DENO_DIR } : {}),
        },
      );
      return support.landlockAbi >= 6 && support.seccomp;
    }
    // Workers find bubblewrap and setpriv on PATH, as this does.
    default:
      return onPath(tool);
  }
}

/**
 * The directory of PostgreSQL's server programs (Debian's
 * /usr/lib/postgresql/<version>/bin, or `AIRLOCK_PG_BIN`), as
 * scripts/ci/start_postgres.sh finds it; `undefined` when there is none.
 */
export function postgresBin(): string | undefined {
  const given = process.env.AIRLOCK_PG_BIN;
  if (given) return isExecutable(join(given, "postgres")) ? given : undefined;
  let versions: string[] = [];
  try {
    versions = readdirSync("/usr/lib/postgresql");
  } catch {
    // Not Debian's layout.
  }
  for (const version of versions.sort().reverse()) {
    const bin = join("/usr/lib/postgresql", version, "bin");
    if (isExecutable(join(bin, "postgres"))) return bin;
  }
  return onPath("initdb") && onPath("postgres") ? "" : undefined;
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

const found = new Map<Tool, boolean>();

/**
 * Whether a system tool is here (looked up once per process).
 *
 * @param tool The tool.
 * @returns Whether tests that need it can run.
 */
export function hasTool(tool: Tool): boolean {
  let here = found.get(tool);
  if (here === undefined) {
    here = probe(tool);
    found.set(tool, here);
  }
  return here;
}

/** Options for `test()` and `describe()`: a skip with its reason, or none. */
export interface SkipOptions {
  /** Why it is skipped. */
  skip?: string;
}

const announced = new Set<string>();

/**
 * Test options that skip a test or a `describe` block, with the reason
 * printed on stderr once, when `reason` is given. With
 * `AIRLOCK_REQUIRE_TOOLS=1` (set by `.ci/run`) the block is skipped all the
 * same but a failing test naming the reason is registered in its place (once
 * per reason), so CI cannot pass without the tool.
 *
 * Call it where tests are registered (top level or a describe body), never
 * inside a running test.
 *
 * @param reason Why the tests cannot run here, naming the missing tool and
 * how to install it; `undefined` when they can.
 * @returns Options to pass to `test()` or `describe()`.
 */
export function skipUnless(reason: string | undefined): SkipOptions {
  if (reason === undefined) return {};
  if (!announced.has(reason)) {
    announced.add(reason);
    if (process.env[REQUIRE_TOOLS_ENV] === "1") {
      test(`required: ${reason}`, () => {
        throw new Error(
          `A required tool is missing (${REQUIRE_TOOLS_ENV}=1): ${reason}`,
        );
      });
    } else {
      process.stderr.write(`skipping tests: ${reason}\n`);
    }
  }
  return { skip: reason };
}

/**
 * Test options that skip a test or `describe` block when one of the system
 * tools it needs is missing, printing which and how to install it (see
 * {@linkcode skipUnless}: with `AIRLOCK_REQUIRE_TOOLS=1` a missing tool
 * fails instead).
 *
 * @param tools The tools the tests need.
 * @returns Options to pass to `test()` or `describe()`.
 *
 * @example
 * ```ts ignore
 * describe("sandbox: os", needs("bwrap"), () => { ... });
 * test("Python worker", needs("python3"), async () => { ... });
 * ```
 */
export function needs(...tools: Tool[]): SkipOptions {
  const missing = tools.filter((tool) => !hasTool(tool));
  if (missing.length === 0) return {};
  return skipUnless(
    missing.map((tool) =>
      `${TOOLS[tool].what} is not installed (install it with "${
        TOOLS[tool].install
      }")`
    ).join("; "),
  );
}

/**
 * Test options for tests that need the OS sandbox: bubblewrap, or Landlock
 * where bubblewrap is missing or made unusable (the second CI pass).
 *
 * @returns Options to pass to `test()` or `describe()`.
 */
export function needsSandbox(): SkipOptions {
  return hasTool("bwrap") ? {} : needs("landlock");
}

/**
 * Test options for tests that start workers on `runtime` with airlock's
 * default permissions: a Bun worker runs in the OS sandbox (Bun has no
 * permission model), so it needs bubblewrap or Landlock; a Deno worker
 * needs nothing.
 *
 * @param runtime The workers' runtime (default: the one running the tests).
 * @returns Options to pass to `test()` or `describe()`.
 */
export function needsWorkers(runtime: "deno" | "bun" = RUNTIME): SkipOptions {
  return runtime === "bun" ? needsSandbox() : {};
}
