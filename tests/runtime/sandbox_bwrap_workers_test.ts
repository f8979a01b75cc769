// bwrapArgv() (src/runtime/sandbox/bwrap.ts) confining real workers: the
// probe fixture inside bubblewrap, on each runtime. The argv itself, built
// without running it: sandbox_bwrap_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { bwrapArgv, bwrapProbeArgv } from "../../src/runtime/sandbox/bwrap.ts";
import { bwrapEnvironment } from "../../src/runtime/sandbox/bwrap_environment.ts";
import { exitThroughWrapper } from "../../src/runtime/launch/exit.ts";
import { findExecutable } from "../../src/runtime/launch/executable.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { skipUnless } from "../_helpers/tools.ts";
import { within } from "../_helpers/wait.ts";
import { BASE, refuse } from "./_bwrap.ts";

checkNoLeaks();

interface RunResult {
  code: number;
  pid: number;
  stdout: string;
  stderr: string;
}

interface BunSpawn {
  spawn(argv: string[], options: {
    env: Record<string, string>;
    stdin: "ignore";
    stdout: "pipe";
    stderr: "pipe";
  }): {
    pid: number;
    stdout: ReadableStream<Uint8Array>;
    stderr: ReadableStream<Uint8Array>;
    exited: Promise<number>;
  };
}

interface DenoCommand {
  Command: new (program: string, options: {
    args: string[];
    env: Record<string, string>;
    clearEnv: true;
    stdin: "null";
    stdout: "piped";
    stderr: "piped";
  }) => {
    spawn(): {
      pid: number;
      output(): Promise<
        { code: number; stdout: Uint8Array; stderr: Uint8Array }
      >;
    };
  };
}

/** Runs a command to completion with exactly `env`, on whichever runtime runs the tests. */
async function run(
  argv: string[],
  env: Record<string, string>,
): Promise<RunResult> {
  const bun = (globalThis as { Bun?: BunSpawn }).Bun;
  if (bun) {
    const child = bun.spawn(argv, {
      env,
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr, code] = await Promise.all([
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]);
    return { code, pid: child.pid, stdout, stderr };
  }
  const deno = (globalThis as { Deno?: DenoCommand }).Deno;
  if (!deno) throw new Error("Cannot spawn: neither Bun nor Deno");
  const [program = "", ...args] = argv;
  const child = new deno.Command(program, {
    args,
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = await child.output();
  const decoder = new TextDecoder();
  return {
    code: output.code,
    pid: child.pid,
    stdout: decoder.decode(output.stdout),
    stderr: decoder.decode(output.stderr),
  };
}

const REPO = fileURLToPath(new URL("../../", import.meta.url));
const PROBE = fileURLToPath(
  new URL("../fixtures/sandbox/probe.ts", import.meta.url),
);
const BWRAP = process.platform === "linux"
  ? findExecutable("bwrap", { path: process.env.PATH }, refuse)
  : undefined;

function binary(name: "deno" | "bun"): string | undefined {
  try {
    return realpathSync(join(REPO, "node_modules", ".bin", name));
  } catch {
    return undefined;
  }
}

/** Why the real sandbox tests of a runtime cannot run here, or false. */
async function skipReason(runtime: "deno" | "bun"): Promise<string | false> {
  if (process.platform !== "linux") {
    return `the OS sandbox needs Linux, this is ${process.platform}`;
  }
  if (!BWRAP) {
    return 'bubblewrap ("bwrap") is not installed (install it with "apt-get install bubblewrap")';
  }
  const bin = binary(runtime);
  if (!bin) return `no ${runtime} binary in node_modules/.bin`;
  const probe = await within(
    run(bwrapProbeArgv(BWRAP, bin), {}),
    30_000,
    "bwrap probe",
  );
  if (probe.code !== 0) return `bwrap cannot run here: ${probe.stderr.trim()}`;
  return false;
}

// Printed, and a failure under AIRLOCK_REQUIRE_TOOLS=1 (see skipUnless).
const SKIP = {
  deno: skipUnless(await skipReason("deno") || undefined).skip ?? false,
  bun: skipUnless(await skipReason("bun") || undefined).skip ?? false,
};

type Outcome = { ok: true; value: unknown } | { ok: false; error: string };

async function probeInSandbox(runtime: "deno" | "bun"): Promise<{
  results: Record<string, Outcome>;
  spawnedPid: number;
  dirs: { a: string; b: string; cwd: string };
}> {
  const bin = binary(runtime) ?? "";
  const scratch = realpathSync(
    mkdtempSync(join(tmpdir(), "airlock-sandbox-real-")),
  );
  const a = join(scratch, "A");
  const b = join(scratch, "B");
  mkdirSync(a);
  mkdirSync(b);
  writeFileSync(join(a, "a.txt"), "inside-secret");
  writeFileSync(join(b, "b.txt"), "outside-secret");
  const server = createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const address = server.address();
    const port = typeof address === "object" && address ? address.port : 0;
    const config = JSON.stringify({
      inside: join(a, "a.txt"),
      outside: join(b, "b.txt"),
      port,
      parentPid: process.pid,
    });
    const env: Record<string, string> = { GIVEN: "yes", NO_COLOR: "1" };
    if (runtime === "deno") env.DENO_DIR = "/tmp/.deno";
    const command = runtime === "deno"
      ? [bin, "run", "-A", "--no-config", "--no-lock", PROBE, config]
      : [bin, PROBE, config];
    const argv = bwrapArgv({
      bwrap: BWRAP ?? "",
      runtimeBinary: bin,
      command,
      readOnly: [join(REPO, "tests", "fixtures", "sandbox")],
      read: [],
      write: [a],
      net: false,
      run: [],
      ffi: true,
      env,
      cwd: a,
    });
    // bubblewrap passes on the environment it is started with, which is
    // the worker's (bwrapEnvironment), never the parent's: SECRET, in the
    // parent's, is absent.
    const result = await within(
      run(argv, bwrapEnvironment(env)),
      60_000,
      `sandboxed ${runtime} probe`,
    );
    assert.equal(result.code, 0, `probe failed:\n${result.stderr}`);
    const results = JSON.parse(result.stdout.trim().split("\n").at(-1) ?? "{}");
    return { results, spawnedPid: result.pid, dirs: { a, b, cwd: a } };
  } finally {
    server.close();
    rmSync(scratch, { recursive: true, force: true });
  }
}

function assertConfined(
  runtime: "deno" | "bun",
  results: Record<string, Outcome>,
  spawnedPid: number,
): void {
  const get = (name: string): Outcome => {
    const outcome = results[name];
    assert.ok(outcome, `no result for ${name}`);
    return outcome;
  };
  assert.deepEqual(get("readInside"), { ok: true, value: "inside-secret" });
  assert.equal(get("readOutside").ok, false, "read outside A");
  assert.equal(get("listOutside").ok, false, "list outside A");
  assert.equal(get("writeInside").ok, true, "write inside A");
  assert.equal(get("writeOutside").ok, false, "write outside A");
  assert.equal(get("writeRoot").ok, false, "write to /");
  assert.equal(get("writeTmp").ok, true, "write to the private /tmp");
  assert.equal(get("procRootEscape").ok, false, "/proc/<parent>/root escape");
  assert.deepEqual(
    get("connect"),
    { ok: false, error: "ECONNREFUSED" },
    "socket to the parent",
  );
  assert.equal(get("spawnSh").ok, false, "start sh");
  assert.equal(get("spawnBinSh").ok, false, "start /bin/sh");

  const env = get("env");
  assert.ok(env.ok);
  const seen = env.value as Record<string, string>;
  assert.equal(seen.GIVEN, "yes");
  assert.equal(seen.SECRET, undefined, "a variable it was not given");
  // bwrap always sets PWD. Deno 2.9 adds DENO_NODE_SHIM_ACTIVE and a PATH
  // of its own "node" shim directory (unless DENO_DISABLE_NODE_SHIM is set).
  const allowed = ["GIVEN", "NO_COLOR", "PWD"];
  if (runtime === "deno") {
    allowed.push("DENO_DIR", "DENO_NODE_SHIM_ACTIVE", "PATH");
  }
  assert.deepEqual(
    Object.keys(seen).filter((key) => !allowed.includes(key)),
    [],
  );
  assert.ok(
    seen.PATH === undefined || seen.PATH === "/tmp/.deno/node_compat_bin",
    String(seen.PATH),
  );

  const inside = get("ffiOpenInside");
  assert.ok(
    inside.ok && typeof inside.value === "number" && inside.value >= 0,
    "FFI open(2) inside A",
  );
  assert.deepEqual(
    get("ffiOpenOutside"),
    { ok: true, value: -1 },
    "FFI open(2) outside A",
  );

  const pid = get("pid");
  assert.ok(pid.ok && typeof pid.value === "number");
  assert.notEqual(
    pid.value,
    spawnedPid,
    "the spawned pid is bwrap's, not the worker's",
  );
}

describe("bwrapArgv() confines real workers", () => {
  test("bwrapArgv() confines a Deno worker run with -A, FFI included", {
    skip: SKIP.deno,
  }, async () => {
    const { results, spawnedPid } = await probeInSandbox("deno");
    assertConfined("deno", results, spawnedPid);
  });

  test(
    "bwrapArgv() confines a Bun worker, FFI included",
    { skip: SKIP.bun },
    async () => {
      const { results, spawnedPid } = await probeInSandbox("bun");
      assertConfined("bun", results, spawnedPid);
    },
  );

  test(
    "exitThroughWrapper() names the signal that killed a real sandboxed worker",
    {
      skip: SKIP[RUNTIME],
    },
    async () => {
      const bin = binary(RUNTIME) ?? "";
      const script = 'process.kill(process.pid, "SIGKILL")';
      const command = RUNTIME === "deno"
        ? [bin, "eval", script]
        : [bin, "-e", script];
      const argv = bwrapArgv({
        ...BASE,
        bwrap: BWRAP ?? "",
        runtimeBinary: bin,
        command,
        env: { DENO_DIR: "/tmp/.deno" },
      });
      const result = await within(
        run(argv, bwrapEnvironment({ DENO_DIR: "/tmp/.deno" })),
        30_000,
        "sandboxed kill",
      );
      assert.equal(result.code, 137);
      assert.deepEqual(exitThroughWrapper(result.code, null), {
        code: null,
        signal: "SIGKILL",
      });
    },
  );

  test("bwrapArgv() write grants reach the host and nothing else does", {
    skip: SKIP[RUNTIME],
  }, async () => {
    const bin = binary(RUNTIME) ?? "";
    const scratch = realpathSync(
      mkdtempSync(join(tmpdir(), "airlock-sandbox-write-")),
    );
    try {
      const out = join(scratch, "out");
      mkdirSync(out);
      const script = `import("node:fs").then((fs) => {
        fs.writeFileSync(${JSON.stringify(join(out, "kept.txt"))}, "kept");
        try { fs.writeFileSync(${
        JSON.stringify(join(scratch, "lost.txt"))
      }, "lost"); } catch {}
      })`;
      const command = RUNTIME === "deno"
        ? [bin, "eval", script]
        : [bin, "-e", script];
      const argv = bwrapArgv({
        ...BASE,
        bwrap: BWRAP ?? "",
        runtimeBinary: bin,
        command,
        write: [out],
        env: { DENO_DIR: "/tmp/.deno" },
        cwd: out,
      });
      const result = await within(
        run(argv, bwrapEnvironment({ DENO_DIR: "/tmp/.deno" })),
        30_000,
        "sandboxed write",
      );
      assert.equal(result.code, 0, result.stderr);
      assert.equal(readFileSync(join(out, "kept.txt"), "utf8"), "kept");
      assert.equal(existsSync(join(scratch, "lost.txt")), false);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
