// The native confine step (src/runtime/sandbox/native/confine.c): its
// checked-in bytes are what its source builds to, its spec is decoded
// defensively, and it leaves the worker what the runtime step leaves
// (environment, descriptors) or less. Its confinement itself is
// tests/runtime/confine_step_test.ts's, run on both steps.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { Buffer } from "node:buffer";
import { fileURLToPath } from "node:url";
import {
  buildNativeConfine,
  compilerVersion,
  NATIVE_CONFINE_TARGETS,
} from "../../scripts/build_native_confine.ts";
import {
  NATIVE_CONFINE_MAGIC,
  nativeConfineArgv,
  nativeConfineCompiler,
  nativeConfineElf,
} from "../../src/runtime/sandbox/native_step.ts";
import {
  confinedArgv,
  type ConfineRunner,
  confineSpec,
} from "../../src/runtime/sandbox/confine_command.ts";
import { probeConfineSupport } from "../../src/runtime/sandbox/facts.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import {
  CONFINE_FAILED_EXIT_CODE,
  CONFINE_HELD_ENV_PREFIX,
} from "../../src/runtime/sandbox/spec.ts";
import { executionFiles } from "../../src/runtime/launch/executable.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { skipUnless } from "../_helpers/tools.ts";

checkNoLeaks();

const repository = fileURLToPath(new URL("../../", import.meta.url));
const dir = realpathSync(mkdtempSync(join(tmpdir(), "airlock-native-")));
after(() => rmSync(dir, { recursive: true, force: true }));

const elf = nativeConfineElf(process.arch);
const program = join(dir, "airlock-confine");
if (elf !== undefined) writeFileSync(program, elf, { mode: 0o755 });

/** Runs the native step with raw arguments. */
function run(
  args: readonly string[],
  env: Record<string, string> = { PATH: "/usr/bin:/bin" },
): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(program, args, {
    env,
    encoding: "utf8",
    timeout: 30_000,
  });
  return {
    status: result.status,
    stdout: String(result.stdout),
    stderr: String(result.stderr),
  };
}

for (const target of NATIVE_CONFINE_TARGETS) {
  const built = nativeConfineCompiler(target.arch);
  const here = compilerVersion(target.compiler);
  const reason = built === undefined
    ? undefined // no checked-in build to compare (said where it is used)
    : here === undefined
    ? `${target.compiler} is not installed (apt-get install gcc${
      target.arch === "x64" ? "" : "-aarch64-linux-gnu"
    })`
    : here !== built
    ? `the native confine step for ${target.arch} was built with "${built}", this machine has "${here}" (rebuild: deno run -A scripts/build_native_confine.ts)`
    : undefined;
  // The x64 build is enforced in CI (it has gcc); the cross compiler is
  // optional there.
  const options = reason === undefined
    ? {}
    : target.arch === "x64"
    ? skipUnless(reason)
    : (process.stderr.write(`skipping tests: ${reason}\n`), { skip: reason });
  test(
    `native confine step for ${target.arch}: the checked-in bytes are what confine.c builds to`,
    options,
    () => {
      assert.notEqual(built, undefined, `no build for ${target.arch}`);
      const rebuilt = buildNativeConfine(repository, target.compiler);
      const checkedIn = new Uint8Array(
        Buffer.from(
          readFileSync(join(repository, target.module), "utf8").match(
            /NATIVE_CONFINE_ELF =\s*"([^"]+)"/,
          )?.[1] ?? "",
          "base64",
        ),
      );
      assert.equal(rebuilt.byteLength, checkedIn.byteLength);
      assert.ok(
        rebuilt.every((byte, index) => byte === checkedIn[index]),
        "the bytes differ: rebuild with scripts/build_native_confine.ts",
      );
    },
  );
}

const qemu = spawnSync("qemu-aarch64-static", ["--version"]).status === 0;
test(
  "native confine step for arm64 runs (under qemu-aarch64-static) and refuses a bad spec",
  {
    ...(qemu ? {} : { skip: "qemu-aarch64-static is not installed" }),
  },
  () => {
    const arm = nativeConfineElf("arm64");
    assert.ok(arm !== undefined);
    const file = join(dir, "airlock-confine-arm64");
    writeFileSync(file, arm, { mode: 0o755 });
    const probe = spawnSync("qemu-aarch64-static", [file, "--probe"], {
      encoding: "utf8",
    });
    assert.equal(probe.status, 0, probe.stderr);
    const answer = JSON.parse(probe.stdout);
    assert.equal(typeof answer.landlockAbi, "number");
    const bad = spawnSync("qemu-aarch64-static", [file, "nonsense"], {
      encoding: "utf8",
    });
    assert.equal(bad.status, CONFINE_FAILED_EXIT_CODE);
    assert.match(bad.stderr, /^airlock confine: Invalid confine spec/);
  },
);

describe("native confine step", {
  ...(elf === undefined
    ? { skip: `no native confine step for ${process.arch}` }
    : process.platform !== "linux"
    ? { skip: "Linux only" }
    : {}),
}, () => {
  test("native confine step --probe answers as the runtime step's probe", () => {
    const probed = run(["--probe"]);
    assert.equal(probed.status, 0, probed.stderr);
    const runner: ConfineRunner = {
      runtime: RUNTIME,
      binary: realpathSync(process.execPath),
    };
    const support = probeConfineSupport(runner, {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      ...(process.env.HOME ? { HOME: process.env.HOME } : {}),
      ...(process.env.DENO_DIR ? { DENO_DIR: process.env.DENO_DIR } : {}),
    });
    assert.deepEqual(JSON.parse(probed.stdout), {
      landlockAbi: support.landlockAbi,
      seccomp: support.seccomp,
    });
  });

  test("native confine step refuses every malformed spec before it confines or runs anything", () => {
    const marker = join(dir, "ran");
    const tail = ["--", "/bin/sh", "-c", `echo > ${marker}`];
    const bad: [string, string[]][] = [
      ["no version", []],
      ["not version 1", [
        "airlock-confine/2",
        "/",
        "-",
        "0",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["cwd is not an absolute path", [
        NATIVE_CONFINE_MAGIC,
        "tmp",
        "-",
        "0",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["landlock is not", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "7,1,0",
        "0",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["fewer path rules than counted", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "1,1,0,0",
        "99",
        "1,0",
        "/",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["a path rule is not ACCESS,FLAGS", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "1,1,0,0",
        "1",
        "1",
        "/",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["a path rule is not ACCESS,FLAGS", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "1,1,0,0",
        "1",
        "99999999999999999999,0",
        "/",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["path is not absolute", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "1,1,0,0",
        "1",
        "1,0",
        "etc",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["above 65535", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "4,1,1,0",
        "0",
        "1",
        "65536,1",
        "-",
        "0",
        ...tail,
      ]],
      ["rules without a ruleset", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "-",
        "1",
        "1,0",
        "/",
        "0",
        "-",
        "0",
        ...tail,
      ]],
      ["seccomp is not hex", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "-",
        "0",
        "0",
        "abc",
        "0",
        ...tail,
      ]],
      ["seccomp is not hex", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "-",
        "0",
        "0",
        "zz",
        "0",
        ...tail,
      ]],
      ["fewer changes than counted", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "-",
        "0",
        "0",
        "-",
        "9",
        ...tail,
      ]],
      ["a change has no name", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "-",
        "0",
        "0",
        "-",
        "1",
        "=x",
        ...tail,
      ]],
      ["before the command", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "-",
        "0",
        "0",
        "-",
        "0",
        "/bin/sh",
      ]],
      ["argv is not a non-empty list", [
        NATIVE_CONFINE_MAGIC,
        "/",
        "-",
        "0",
        "0",
        "-",
        "0",
        "--",
      ]],
    ];
    for (const [says, args] of bad) {
      const result = run(args);
      assert.equal(result.status, CONFINE_FAILED_EXIT_CODE, says);
      assert.match(result.stderr, /^airlock confine: Invalid confine spec: /);
      assert.ok(result.stderr.includes(says), `${says}: ${result.stderr}`);
      assert.equal(result.stderr.split("\n").length, 2, "one line");
    }
    assert.throws(() => readFileSync(marker), /ENOENT/);
    // An empty or truncated filter is refused before exec, too.
    const short = run([
      NATIVE_CONFINE_MAGIC,
      "/",
      "-",
      "0",
      "0",
      "00",
      "0",
      ...tail,
    ]);
    assert.equal(short.status, CONFINE_FAILED_EXIT_CODE);
    assert.match(short.stderr, /the seccomp program is empty or truncated/);
    assert.throws(() => readFileSync(marker), /ENOENT/);
  });

  test("native confine step gives the worker the environment the runtime step gives it", () => {
    const runner: ConfineRunner = {
      runtime: RUNTIME,
      binary: realpathSync(process.execPath),
    };
    const loader = executionFiles("/usr/bin/env", "/usr/bin:/bin", (detail) => {
      throw new Error(detail);
    });
    // Held variables win over the step's own, an empty one, removals and
    // additions, and an addition a held variable overrides.
    const spec = confineSpec({
      landlockAbi: 0,
      seccomp: false,
      permissions: resolvePermissions(undefined, dir),
      executables: loader,
      readOnly: [],
      cwd: dir,
      argv: ["/usr/bin/env", "-0"],
      env: { STEP_ONLY: null, ADDED: "step", OVERRIDDEN: "step", GONE: null },
    });
    const env: Record<string, string> = {
      PATH: "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
      STEP_ONLY: "x",
      SHARED: "own",
      GONE: "own",
      BARE: "own",
      BAREX: "own",
      [`${CONFINE_HELD_ENV_PREFIX}SHARED`]: "held",
      [`${CONFINE_HELD_ENV_PREFIX}OVERRIDDEN`]: "held",
      [`${CONFINE_HELD_ENV_PREFIX}EMPTY`]: "",
      ...(process.env.DENO_DIR ? { DENO_DIR: process.env.DENO_DIR } : {}),
    };
    const viaRuntime = confinedArgv(runner, spec);
    const viaNative = nativeConfineArgv(program, spec);
    const entries = (argv: string[]): string[] => {
      const result = spawnSync(argv[0] as string, argv.slice(1), {
        env,
        encoding: "utf8",
        timeout: 60_000,
      });
      assert.equal(result.status, 0, String(result.stderr));
      return String(result.stdout).split("\0").filter((entry) =>
        entry !== "" && !entry.startsWith("DENO_DIR=") &&
        !entry.startsWith("BUN_")
      ).sort();
    };
    const native = entries(viaNative);
    assert.deepEqual(native, entries(viaRuntime));
    assert.ok(native.includes("SHARED=held"));
    assert.ok(native.includes("OVERRIDDEN=held"));
    assert.ok(native.includes("ADDED=step"));
    assert.ok(!native.some((entry) => entry.startsWith("STEP_ONLY=")));
    assert.ok(!native.some((entry) => entry.startsWith("GONE=")));
  });

  test("native confine step --pdeathsig refuses a parent inside its pid namespace, before it runs anything", () => {
    // Outside a pid namespace the parent is visible (getppid() > 0): what
    // the step sees when bubblewrap died before the prctl and the
    // namespace's init took it over. It must not run the worker then.
    const marker = join(dir, "ran-without-parent");
    const spec = confineSpec({
      landlockAbi: 0,
      seccomp: false,
      permissions: resolvePermissions(undefined, dir),
      executables: [],
      readOnly: [],
      cwd: dir,
      argv: ["/bin/sh", "-c", `echo > ${marker}`],
    });
    const argv = nativeConfineArgv(program, spec, { pdeathsig: true });
    assert.equal(argv[2], "--pdeathsig");
    const result = run(argv.slice(1));
    assert.equal(result.status, CONFINE_FAILED_EXIT_CODE, result.stderr);
    assert.match(
      result.stderr,
      /^airlock confine: the parent \(bubblewrap\) ended before the parent-death signal was set \(errno 3\)\n$/,
    );
    assert.equal(existsSync(marker), false, "the worker ran");
    // Without the flag the same spec runs.
    assert.equal(run(nativeConfineArgv(program, spec).slice(1)).status, 0);
    assert.equal(existsSync(marker), true);
  });

  test("native confine step leaves the worker no descriptor above stderr", () => {
    const spec = confineSpec({
      landlockAbi: 0,
      seccomp: false,
      permissions: resolvePermissions(undefined, dir),
      executables: [],
      readOnly: [],
      cwd: dir,
      argv: ["/bin/sh", "-c", "ls /proc/self/fd"],
    });
    const argv = nativeConfineArgv(program, spec);
    const result = spawnSync(argv[0] as string, argv.slice(1), {
      env: { PATH: "/usr/bin:/bin" },
      encoding: "utf8",
      // Descriptors 3 and 4 open in the step (the pipe bubblewrap read the
      // step from is one such).
      stdio: ["pipe", "pipe", "pipe", "pipe", "pipe"],
      timeout: 30_000,
    });
    assert.equal(result.status, 0, String(result.stderr));
    // 0, 1, 2 and the one ls opens to list the directory.
    const fds = String(result.stdout).trim().split(/\s+/).map(Number);
    assert.deepEqual(fds.filter((fd) => fd <= 2), [0, 1, 2]);
    assert.ok(fds.length <= 4, `open: ${fds.join(" ")}`);
    assert.ok(!fds.includes(4), `open: ${fds.join(" ")}`);
  });
});
