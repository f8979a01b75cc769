// Single compiled binaries: a program that uses airlock keeps working when
// built with `bun build --compile`, its workers being the executable itself
// (self-exec), and the same path through `deno run` and `bun` with
// AIRLOCK_SELF_EXEC=1 (`deno compile` needs a download these machines cannot
// make). Runs under both test runners: it spawns the tools itself.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs, skipUnless } from "../_helpers/tools.ts";

checkNoLeaks();

const app = join(dirname(fileURLToPath(import.meta.url)), "app");
const root = join(app, "..", "..", "..");
const scratch = mkdtempSync(join(tmpdir(), "airlock-compile-"));
const secretDir = join(scratch, "secret");
mkdirSync(secretDir);
const secret = join(secretDir, "token.txt");
writeFileSync(secret, "s3cr3t\n");

after(() => rmSync(scratch, { recursive: true, force: true }));

function tool(name: "bun" | "deno"): string {
  const local = join(root, "node_modules", ".bin", name);
  return existsSync(local) ? local : name;
}

/** The environment of the programs run here: PATH and HOME only. */
function baseEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const name of ["PATH", "HOME", "DENO_DIR", "XDG_CACHE_HOME"]) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  return { ...env, ...extra };
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(
  argv: string[],
  env: Record<string, string>,
  timeoutMs: number,
  cwd = app,
): Promise<Run> {
  const [program, ...args] = argv;
  return new Promise((resolve) => {
    execFile(
      program as string,
      args,
      { cwd, env, timeout: timeoutMs, killSignal: "SIGKILL" },
      (error, stdout, stderr) => {
        const code = error
          ? typeof (error as { code?: unknown }).code === "number"
            ? (error as { code: number }).code
            : null
          : 0;
        resolve({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

async function compile(
  entry: string,
  out: string,
  worker = "./workers/probe_worker.ts",
): Promise<string> {
  const outfile = join(scratch, out);
  const built = await run(
    [
      tool("bun"),
      "build",
      "--compile",
      entry,
      worker,
      "--outfile",
      outfile,
    ],
    baseEnv(),
    25_000,
  );
  assert.equal(
    built.code,
    0,
    `bun build failed:\n${built.stdout}${built.stderr}`,
  );
  return outfile;
}

interface Report {
  parent: { pid: number; execPath: string };
  worker: {
    pid: number;
    execPath: string;
    url: string;
    greeting: string | null;
    bunBeBun: string | null;
    marker: string | null;
  };
  refused: { name: string; code: unknown } | null;
  crashed: { name: string; signal: string | null; pid: number | null } | null;
  after: { pid: number };
}

function report(result: Run): Report {
  assert.equal(
    result.code,
    0,
    `the program failed:\n${result.stdout}\n${result.stderr}`,
  );
  const line = result.stdout.trim().split("\n").at(-1) ?? "";
  return JSON.parse(line) as Report;
}

/** What every self-exec run shows, compiled or not. */
function checkReport(result: Report): void {
  assert.notEqual(result.worker.pid, result.parent.pid);
  assert.equal(
    result.worker.execPath,
    result.parent.execPath,
    "the worker runs the parent's own binary",
  );
  assert.equal(result.worker.greeting, "hello", "env is passed");
  assert.equal(result.worker.bunBeBun, null, "BUN_BE_BUN is not passed on");
  assert.equal(result.worker.marker, null, "the marker is cleared once read");
  assert.ok(result.refused, "a read outside the grants is refused");
  assert.deepEqual(result.crashed?.name, "WorkerCrashedError");
  assert.equal(result.crashed?.signal, "SIGKILL");
  assert.equal(result.crashed?.pid, result.worker.pid);
  assert.notEqual(
    result.after.pid,
    result.worker.pid,
    "a new worker after the crash",
  );
}

describe("bun build --compile", needs("bwrap"), () => {
  test("a compiled program's workers are the executable itself, sandboxed", async () => {
    const binary = await compile("./main.ts", "app");
    const result = report(await run([binary, secret], baseEnv(), 20_000));
    checkReport(result);
    assert.equal(result.parent.execPath, binary);
    assert.match(result.worker.url, /\/\$bunfs\/.*probe_worker/);
    // bubblewrap shows the worker nothing outside its grants.
    assert.equal(result.refused?.code, "ENOENT");
  });

  test("a compiled program not set up for self-exec stops instead of looping", async () => {
    const binary = await compile("./loop.ts", "loop");
    const result = await run([binary], baseEnv(), 20_000);
    assert.equal(result.code, 3, `${result.stdout}\n${result.stderr}`);
    assert.match(result.stdout, /would start itself again in a loop/);
  });
});

/**
 * A real N-API add-on (msgpackr's optional native part, a dev dependency),
 * in the package layout @libsql/client and lmdb use: a platform package
 * that the library requires by a name computed at run time.
 */
const addonPackage =
  `@msgpackr-extract/msgpackr-extract-${process.platform}-${process.arch}`;
const addonDir = join(root, "node_modules", ...addonPackage.split("/"));
const addonMissing = existsSync(join(addonDir, "node.napi.glibc.node"))
  ? undefined
  : `the native add-on ${addonPackage} (glibc) is not installed here (run "npm ci" on Linux with glibc)`;

describe(
  "bun build --compile, a worker with a native add-on",
  // A compiled program cannot run the Landlock confine step: bwrap only.
  addonMissing ? skipUnless(addonMissing) : needs("bwrap"),
  () => {
    test("an add-on required by a computed name is found beside the executable through NODE_PATH", async () => {
      // The executable in its own directory, the add-on's package copied
      // into node_modules/ beside it, run from a directory outside that
      // tree (Bun also looks up from the working directory).
      const dir = join(scratch, "shipped");
      mkdirSync(join(dir, "node_modules", "@msgpackr-extract"), {
        recursive: true,
      });
      cpSync(addonDir, join(dir, "node_modules", ...addonPackage.split("/")), {
        recursive: true,
      });
      const built = await compile(
        "./native.ts",
        join("shipped", "app"),
        "./workers/native_worker.ts",
      );
      const elsewhere = join(scratch, "elsewhere");
      mkdirSync(elsewhere, { recursive: true });
      const without = await run([built], baseEnv(), 20_000, elsewhere);
      assert.equal(without.code, 0, without.stderr);
      const failure = JSON.parse(without.stdout.trim()) as { error?: string };
      assert.match(
        failure.error ?? "",
        new RegExp(`WorkerStartError: .*Cannot find module '${addonPackage}/`),
      );
      const withPath = await run(
        [built, "--node-path"],
        baseEnv(),
        20_000,
        elsewhere,
      );
      assert.equal(withPath.code, 0, withPath.stderr);
      assert.deepEqual(JSON.parse(withPath.stdout.trim()), {
        addonExport: "function",
      });
    });
  },
);

/** lmdb's add-on (`@lmdb/lmdb-linux-x64`, lmdb being a dev dependency). */
const lmdbAddon = join(
  root,
  "node_modules",
  "@lmdb",
  `lmdb-${process.platform}-${process.arch}`,
  "node.napi.glibc.node",
);

describe(
  "bun build --compile, a worker using lmdb",
  existsSync(lmdbAddon)
    ? needs("bwrap")
    : skipUnless(`lmdb's add-on is not installed here (${lmdbAddon})`),
  () => {
    test("lmdb finds its add-on in prebuilds/<platform>-<arch>/ beside the executable", async () => {
      const dir = join(scratch, "lmdb");
      const data = join(dir, "data");
      mkdirSync(data, { recursive: true });
      const built = await compile(
        "./lmdb.ts",
        join("lmdb", "app"),
        "./workers/lmdb_worker.ts",
      );
      const elsewhere = join(scratch, "elsewhere-lmdb");
      mkdirSync(elsewhere, { recursive: true });
      // As reported (issue 28): its package.json is not on disk in the
      // executable, so the add-on is not found by its package.
      const without = await run([built, data], baseEnv(), 20_000, elsewhere);
      assert.equal(without.code, 0, without.stderr);
      assert.match(
        (JSON.parse(without.stdout.trim()) as { error?: string }).error ?? "",
        /WorkerStartError: .*No native build was found for .*abi=unsupported/,
      );
      // The documented fix: the add-on beside the executable, granted.
      const prebuilds = join(
        dir,
        "prebuilds",
        `${process.platform}-${process.arch}`,
      );
      mkdirSync(prebuilds, { recursive: true });
      cpSync(lmdbAddon, join(prebuilds, "node.napi.glibc.node"));
      const shipped = await run([built, data], baseEnv(), 20_000, elsewhere);
      assert.equal(shipped.code, 0, shipped.stderr);
      assert.deepEqual(JSON.parse(shipped.stdout.trim()), { value: "v" });
    });
  },
);

describe("AIRLOCK_SELF_EXEC=1 without compiling", () => {
  test("deno run: the program's entry runs again as the worker", async () => {
    const result = report(
      await run(
        [tool("deno"), "run", "-A", "--quiet", "./main.ts", secret],
        baseEnv({ AIRLOCK_SELF_EXEC: "1", NO_COLOR: "1" }),
        25_000,
      ),
    );
    checkReport(result);
    assert.match(result.worker.url, /probe_worker\.ts$/);
    // Deno's flags: read access only to the worker's code.
    assert.equal(result.refused?.name, "NotCapable");
  });

  test(
    "bun: the program's entry runs again as the worker",
    needs("bwrap"),
    async () => {
      const result = report(
        await run(
          [tool("bun"), "./main.ts", secret],
          baseEnv({ AIRLOCK_SELF_EXEC: "1" }),
          20_000,
        ),
      );
      checkReport(result);
      assert.equal(result.refused?.code, "ENOENT");
    },
  );
});
