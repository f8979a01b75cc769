/**
 * Tests that need a system tool: skips with the reason and the install
 * command, or failures under `AIRLOCK_REQUIRE_TOOLS=1`.
 *
 * @module
 */

import { test } from "node:test";
import { execFileSync } from "node:child_process";
import {
  accessSync,
  constants as fsConstants,
  readdirSync,
  realpathSync,
  statSync,
} from "node:fs";
import { delimiter, isAbsolute, join } from "node:path";
import process from "node:process";
import { probeConfineSupport } from "../../src/runtime/sandbox/facts.ts";
import "./deno_dir.ts";
import { RUNTIME } from "./runtime.ts";

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
