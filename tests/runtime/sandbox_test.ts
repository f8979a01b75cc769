import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  bwrapArgv,
  bwrapEnvironment,
  type BwrapOptions,
  bwrapProbeArgv,
  LIBRARY_PATHS,
  NETWORK_PATHS,
  PROGRAM_PATHS,
} from "../../src/runtime/sandbox/bwrap.ts";
import { exitThroughWrapper } from "../../src/runtime/launch/exit.ts";
import { findExecutable } from "../../src/runtime/launch/executable.ts";
import {
  denoCacheMounts,
  workerMounts,
} from "../../src/runtime/sandbox/mounts.ts";
import { checkNoLeaks, RUNTIME, skipUnless, within } from "../_helpers.ts";

checkNoLeaks();

function refuse(detail: string): never {
  throw new Error(detail);
}

const BASE: BwrapOptions = {
  bwrap: "/usr/bin/bwrap",
  runtimeBinary: "/opt/deno/deno",
  command: ["/opt/deno/deno", "run", "/app/main.ts"],
  readOnly: [],
  read: [],
  write: [],
  net: false,
  env: {},
  cwd: "/",
};

const ARITY: Record<string, number> = {
  "--ro-bind-try": 2,
  "--bind-try": 2,
  "--setenv": 2,
  "--dev": 1,
  "--proc": 1,
  "--tmpfs": 1,
  "--dir": 1,
  "--chdir": 1,
  "--remount-ro": 1,
  "--cap-drop": 1,
};

interface Parsed {
  flags: string[];
  ops: { op: string; args: string[] }[];
  command: string[];
}

/** Splits a bwrap argv into bare flags, operations with arguments, and the command. */
function parse(argv: readonly string[]): Parsed {
  const parsed: Parsed = { flags: [], ops: [], command: [] };
  let index = 1;
  while (index < argv.length) {
    const arg = argv[index] ?? "";
    if (arg === "--") {
      parsed.command = argv.slice(index + 1);
      break;
    }
    const arity = ARITY[arg];
    if (arity === undefined) {
      parsed.flags.push(arg);
      index += 1;
    } else {
      parsed.ops.push({
        op: arg,
        args: argv.slice(index + 1, index + 1 + arity),
      });
      index += 1 + arity;
    }
  }
  return parsed;
}

/** The destinations of the mount operations, in order, as "op dest". */
function mounts(argv: readonly string[]): string[] {
  return parse(argv).ops
    .filter(({ op }) => !["--setenv", "--chdir", "--cap-drop"].includes(op))
    .map(({ op, args }) => `${op} ${args.at(-1)}`);
}

describe("bwrapArgv() namespaces and process", () => {
  test("bwrapArgv() starts with bwrap and isolates every namespace, pid included", () => {
    const argv = bwrapArgv(BASE);
    assert.equal(argv[0], "/usr/bin/bwrap");
    const { flags, ops } = parse(argv);
    for (
      const flag of [
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--unshare-net",
      ]
    ) {
      assert.ok(flags.includes(flag), flag);
    }
    assert.ok(!flags.includes("--unshare-all"));
    assert.deepEqual(ops.find(({ op }) => op === "--cap-drop")?.args, ["ALL"]);
  });

  test("bwrapArgv() runs the command after --", () => {
    const { command } = parse(bwrapArgv(BASE));
    assert.deepEqual(command, BASE.command);
  });

  test("bwrapArgv() shares the network and mounts resolver and CA files when net is granted", () => {
    const argv = bwrapArgv({ ...BASE, net: true });
    assert.ok(!argv.includes("--unshare-net"));
    const dests = mounts(argv);
    for (const path of NETWORK_PATHS) {
      assert.ok(dests.includes(`--ro-bind-try ${path}`), path);
    }
    assert.ok(
      !mounts(bwrapArgv(BASE)).includes("--ro-bind-try /etc/resolv.conf"),
    );
  });

  test("bwrapArgv() puts only the variables that act at start on its command line; bwrapEnvironment() gives bubblewrap the rest", () => {
    const env = {
      A: "1",
      B: "two words",
      C: "",
      LD_PRELOAD: "/lib/x.so",
      GCONV_PATH: "/g",
      ENV: "/e.sh",
      "BASH_FUNC_exec%%": "() { :; }",
    };
    const argv = bwrapArgv({ ...BASE, env });
    const { ops } = parse(argv);
    assert.deepEqual(
      ops.filter(({ op }) => op === "--setenv").map(({ args }) => args),
      [
        ["LD_PRELOAD", "/lib/x.so"],
        ["GCONV_PATH", "/g"],
        ["ENV", "/e.sh"],
        ["BASH_FUNC_exec%%", "() { :; }"],
      ],
    );
    // bubblewrap passes its own environment on: clearing it would lose it.
    assert.ok(!argv.includes("--clearenv"));
    assert.ok(!argv.includes("two words"));
    assert.deepEqual(bwrapEnvironment(env), { A: "1", B: "two words", C: "" });
  });

  test("bwrapArgv() rejects variable names bwrap cannot set", () => {
    assert.throws(
      () => bwrapArgv({ ...BASE, env: { "A=B": "1" } }),
      RangeError,
    );
    assert.throws(() => bwrapArgv({ ...BASE, env: { "": "1" } }), RangeError);
  });

  test("bwrapArgv() rejects relative paths", () => {
    assert.throws(() => bwrapArgv({ ...BASE, read: ["data"] }), RangeError);
    assert.throws(
      () => bwrapArgv({ ...BASE, readOnly: ["./app"] }),
      RangeError,
    );
    assert.throws(() => bwrapArgv({ ...BASE, cwd: "app" }), RangeError);
  });
});

describe("bwrapArgv() file system", () => {
  test("bwrapArgv() mounts libraries, the runtime and readOnly read-only, then remounts / read-only", () => {
    const argv = bwrapArgv({
      ...BASE,
      readOnly: ["/app", "/app/node_modules"],
    });
    const dests = mounts(argv);
    for (const path of LIBRARY_PATHS) {
      assert.ok(dests.includes(`--ro-bind-try ${path}`), path);
    }
    assert.ok(dests.includes("--ro-bind-try /opt/deno/deno"));
    assert.ok(dests.includes("--ro-bind-try /app"));
    assert.ok(
      !dests.includes("--ro-bind-try /app/node_modules"),
      "covered by /app",
    );
    assert.ok(!dests.some((dest) => dest.startsWith("--bind-try")));
    assert.equal(dests.at(-1), "--remount-ro /");
    for (const path of PROGRAM_PATHS) {
      assert.ok(!dests.includes(`--ro-bind-try ${path}`), path);
    }
  });

  test("bwrapArgv() gives a private /tmp, /dev and /proc", () => {
    const dests = mounts(bwrapArgv(BASE));
    assert.ok(dests.includes("--tmpfs /tmp"));
    assert.ok(dests.includes("--dev /dev"));
    assert.ok(dests.includes("--proc /proc"));
  });

  test("bwrapArgv() binds read grants read-only and write grants read-write", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, read: ["/data/ref"], write: ["/data/out"] }),
    );
    assert.ok(dests.includes("--ro-bind-try /data/ref"));
    assert.ok(dests.includes("--bind-try /data/out"));
  });

  test("bwrapArgv() lets a write grant win over read-only mounts of the same or inner paths", () => {
    const dests = mounts(
      bwrapArgv({
        ...BASE,
        readOnly: ["/proj/workers"],
        read: ["/proj", "/data/A/sub"],
        write: ["/proj", "/data/A"],
      }),
    );
    assert.ok(dests.includes("--bind-try /proj"));
    assert.ok(!dests.includes("--ro-bind-try /proj"));
    assert.ok(!dests.includes("--ro-bind-try /proj/workers"));
    assert.ok(dests.includes("--bind-try /data/A"));
    assert.ok(!dests.includes("--ro-bind-try /data/A/sub"));
  });

  test("bwrapArgv() mounts an inner write grant after its read-only parent", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, read: ["/data"], write: ["/data/out"] }),
    );
    const parent = dests.indexOf("--ro-bind-try /data");
    const inner = dests.indexOf("--bind-try /data/out");
    assert.ok(parent >= 0 && inner > parent);
  });

  test("bwrapArgv() mounts paths under /tmp after the private /tmp", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, readOnly: ["/tmp/app"], write: ["/tmp/data/A"] }),
    );
    const tmp = dests.indexOf("--tmpfs /tmp");
    assert.ok(tmp >= 0);
    assert.ok(dests.indexOf("--ro-bind-try /tmp/app") > tmp);
    assert.ok(dests.indexOf("--bind-try /tmp/data/A") > tmp);
  });

  test("bwrapArgv() read: true binds / read-only first and keeps the host's /tmp", () => {
    const dests = mounts(bwrapArgv({ ...BASE, read: true }));
    assert.equal(dests[0], "--ro-bind-try /");
    assert.ok(!dests.includes("--tmpfs /tmp"));
    assert.ok(dests.includes("--dev /dev"));
    assert.equal(dests.at(-1), "--remount-ro /");
  });

  test("bwrapArgv() write: true binds / read-write and does not remount it read-only", () => {
    const dests = mounts(bwrapArgv({ ...BASE, write: true, read: ["/x"] }));
    assert.equal(dests[0], "--bind-try /");
    assert.ok(!dests.some((dest) => dest.startsWith("--ro-bind-try")));
    assert.ok(!dests.includes("--remount-ro /"));
  });

  test("bwrapArgv() mounts program directories and absolute run paths when run is granted", () => {
    const named = mounts(
      bwrapArgv({ ...BASE, run: ["git", "/opt/tool/bin/x"] }),
    );
    for (const path of PROGRAM_PATHS) {
      assert.ok(named.includes(`--ro-bind-try ${path}`), path);
    }
    assert.ok(named.includes("--ro-bind-try /opt/tool/bin/x"));
    assert.ok(!named.includes("--ro-bind-try /usr/lib"), "covered by /usr");
    assert.ok(
      mounts(bwrapArgv({ ...BASE, run: true })).includes("--ro-bind-try /usr"),
    );
  });

  test("bwrapArgv() mounts granted ffi libraries read-only", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, ffi: ["/opt/native/libfoo.so"] }),
    );
    assert.ok(dests.includes("--ro-bind-try /opt/native/libfoo.so"));
  });

  test("bwrapArgv() changes to a mounted cwd without making it", () => {
    const argv = bwrapArgv({ ...BASE, readOnly: ["/app"], cwd: "/app/sub" });
    assert.ok(!mounts(argv).includes("--dir /app/sub"));
    assert.deepEqual(
      parse(argv).ops.find(({ op }) => op === "--chdir")?.args,
      ["/app/sub"],
    );
  });

  test("bwrapArgv() makes an empty directory for a cwd no mount covers", () => {
    const argv = bwrapArgv({
      ...BASE,
      readOnly: ["/proj/workers"],
      cwd: "/proj",
    });
    const dests = mounts(argv);
    assert.ok(dests.includes("--dir /proj"));
    assert.ok(
      dests.indexOf("--dir /proj") <
        dests.indexOf("--ro-bind-try /proj/workers"),
    );
    assert.ok(dests.indexOf("--dir /proj") < dests.indexOf("--remount-ro /"));
    assert.deepEqual(
      parse(argv).ops.find(({ op }) => op === "--chdir")?.args,
      ["/proj"],
    );
    assert.ok(
      !mounts(bwrapArgv({ ...BASE, cwd: "/" })).some((d) =>
        d.startsWith("--dir")
      ),
    );
  });

  test("bwrapArgv() normalises paths and drops duplicates", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, readOnly: ["/app/", "/app//", "/app/x/.."] }),
    );
    assert.equal(
      dests.filter((dest) => dest === "--ro-bind-try /app").length,
      1,
    );
  });
});

describe("bwrapProbeArgv()", () => {
  test("bwrapProbeArgv() runs the runtime's --version in an empty sandbox", () => {
    const argv = bwrapProbeArgv("/usr/bin/bwrap", "/opt/bun/bun");
    assert.deepEqual(parse(argv).command, ["/opt/bun/bun", "--version"]);
    assert.ok(argv.includes("--unshare-user"));
  });
});

describe("exitThroughWrapper()", () => {
  test("exitThroughWrapper() maps 128 + N to the signal's name", () => {
    for (
      const [code, signal] of [
        [137, "SIGKILL"],
        [143, "SIGTERM"],
        [139, "SIGSEGV"],
        [134, "SIGABRT"],
        [130, "SIGINT"],
        [129, "SIGHUP"],
      ] as const
    ) {
      assert.deepEqual(exitThroughWrapper(code, null), { code: null, signal });
    }
  });

  test("exitThroughWrapper() maps every real signal number up to 64", {
    skip: process.platform !== "linux" && "real-time signals are Linux's",
  }, () => {
    assert.deepEqual(exitThroughWrapper(128 + 34, null), {
      code: null,
      signal: "SIGRTMIN",
    });
    assert.deepEqual(exitThroughWrapper(128 + 40, null), {
      code: null,
      signal: "SIGRTMIN+6",
    });
    assert.deepEqual(exitThroughWrapper(128 + 64, null), {
      code: null,
      signal: "SIGRTMAX",
    });
  });

  test("exitThroughWrapper() leaves ordinary exit codes alone", () => {
    for (const code of [0, 1, 2, 127, 128, 193, 255]) {
      assert.deepEqual(
        exitThroughWrapper(code, null),
        { code, signal: null },
        String(code),
      );
    }
  });

  test("exitThroughWrapper() passes through a signal that ended the wrapper itself", () => {
    assert.deepEqual(exitThroughWrapper(null, "SIGKILL"), {
      code: null,
      signal: "SIGKILL",
    });
  });
});

describe("findExecutable(), denoCacheMounts() and workerMounts()", () => {
  const root = mkdtempSync(join(tmpdir(), "airlock-sandbox-"));
  after(() => rmSync(root, { recursive: true, force: true }));

  test("findExecutable() finds an executable file on PATH only", () => {
    const bin = realpathSync(mkdtempSync(join(root, "bin-")));
    const other = realpathSync(mkdtempSync(join(root, "other-")));
    writeFileSync(join(other, "bwrap"), "#!/bin/sh\n");
    chmodSync(join(other, "bwrap"), 0o644);
    assert.equal(
      findExecutable("bwrap", { path: `${bin}:${other}` }, refuse),
      undefined,
      "not executable",
    );
    writeFileSync(join(bin, "bwrap"), "#!/bin/sh\n");
    chmodSync(join(bin, "bwrap"), 0o755);
    assert.equal(
      findExecutable("bwrap", { path: `relative:${bin}` }, refuse),
      join(bin, "bwrap"),
    );
    assert.equal(
      findExecutable("bwrap", { path: undefined }, refuse),
      undefined,
    );
  });

  test("findExecutable() resolves node_modules/.bin links to the real binary", () => {
    const project = realpathSync(mkdtempSync(join(root, "project-")));
    const pkg = join(project, "node_modules", "tool", "bin");
    mkdirSync(pkg, { recursive: true });
    mkdirSync(join(project, "node_modules", ".bin"));
    writeFileSync(join(pkg, "tool.exe"), "#!/bin/sh\n");
    chmodSync(join(pkg, "tool.exe"), 0o755);
    symlinkSync(
      "../tool/bin/tool.exe",
      join(project, "node_modules", ".bin", "tool"),
    );
    const inner = join(project, "src", "deep");
    mkdirSync(inner, { recursive: true });
    assert.equal(
      findExecutable("tool", { path: "", from: [inner] }, refuse),
      join(pkg, "tool.exe"),
    );
  });

  test("denoCacheMounts() follows DENO_DIR, then XDG_CACHE_HOME, then HOME", () => {
    assert.deepEqual(denoCacheMounts({ DENO_DIR: "/d/", HOME: "/h" }), {
      denoDir: "/d",
      readOnly: ["/d/remote", "/d/npm"],
    });
    assert.equal(
      denoCacheMounts({ XDG_CACHE_HOME: "/x", HOME: "/h" })?.denoDir,
      "/x/deno",
    );
    assert.equal(denoCacheMounts({ HOME: "/h" })?.denoDir, "/h/.cache/deno");
    assert.equal(
      denoCacheMounts({ DENO_DIR: "rel", HOME: "/h" })?.denoDir,
      "/h/.cache/deno",
    );
    assert.equal(denoCacheMounts({}), undefined);
  });

  test("workerMounts() finds the module's project, node_modules, linked packages, configs and airlock's code", () => {
    const proj = join(root, "proj");
    const pkg = join(root, "airlock");
    const linked = join(root, "linked-pkg");
    mkdirSync(join(proj, "workers", "db"), { recursive: true });
    mkdirSync(join(proj, "node_modules", "@scope"), { recursive: true });
    mkdirSync(join(proj, "data", "B"), { recursive: true });
    mkdirSync(linked);
    mkdirSync(join(pkg, "workers"), { recursive: true });
    mkdirSync(join(pkg, "src"));
    mkdirSync(join(pkg, "tests"));
    writeFileSync(join(proj, "workers", "db", "worker.ts"), "");
    writeFileSync(join(proj, "package.json"), "{}");
    writeFileSync(join(proj, "deno.json"), "{}");
    writeFileSync(join(pkg, "workers", "entry.ts"), "");
    writeFileSync(join(pkg, "worker.ts"), "");
    // A workspace: the linked package lies inside its root.
    writeFileSync(join(root, "pnpm-workspace.yaml"), "");
    symlinkSync(linked, join(proj, "node_modules", "@scope", "linked"));
    symlinkSync(join(root, "missing"), join(proj, "node_modules", "dangling"));

    const found = workerMounts({
      runtime: "deno",
      module: join(proj, "workers", "db", "worker.ts"),
      entry: join(pkg, "workers", "entry.ts"),
      config: join(proj, "deno.json"),
      env: { DENO_DIR: join(root, "deno-dir") },
    });
    const expected = [
      proj,
      join(proj, "deno.json"),
      join(proj, "package.json"),
      join(proj, "node_modules"),
      linked,
      join(pkg, "workers"),
      join(pkg, "src"),
      join(pkg, "worker.ts"),
    ];
    assert.deepEqual([...found.readOnly].sort(), [...expected].sort());
    assert.equal(found.denoDir, join(root, "deno-dir"));
    assert.ok(
      !found.readOnly.includes(root),
      "the project, not what is above it",
    );
    assert.ok(!found.readOnly.includes(join(pkg, "tests")));

    mkdirSync(join(root, "deno-dir", "npm"), { recursive: true });
    const bun = workerMounts({
      runtime: "bun",
      module: join(proj, "workers", "db", "worker.ts"),
      entry: join(pkg, "workers", "entry.ts"),
      env: { DENO_DIR: join(root, "deno-dir") },
    });
    assert.equal(bun.denoDir, undefined);
    assert.ok(!bun.readOnly.includes(join(root, "deno-dir", "npm")));
    const deno = workerMounts({
      runtime: "deno",
      module: undefined,
      entry: undefined,
      env: { DENO_DIR: join(root, "deno-dir") },
    });
    assert.deepEqual(deno.readOnly, [join(root, "deno-dir", "npm")]);
  });
});

// ---------------------------------------------------------------------------
// Real sandboxes: the probe fixture inside bwrap, on each runtime.
// ---------------------------------------------------------------------------

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
