import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import {
  confinedArgv,
  type ConfineRunner,
  confineSpec,
  confineStepArgv,
} from "../../src/runtime/sandbox/confine_command.ts";
import { probeConfineSupport } from "../../src/runtime/sandbox/facts.ts";
import type { Permissions } from "../../src/runtime/permissions.ts";
import { landlockWrapper } from "../../src/runtime/sandbox/confine_wrapper.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import {
  CONFINE_FAILED_EXIT_CODE,
  CONFINE_STDERR_PREFIX,
} from "../../src/runtime/sandbox/spec.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { executionFiles } from "../../src/runtime/launch/executable.ts";
import {
  NATIVE_CONFINE_PATH,
  nativeConfineArgv,
  nativeConfineElf,
} from "../../src/runtime/sandbox/native_step.ts";
import type { ConfineSpec } from "../../src/runtime/sandbox/spec.ts";

/**
 * The shell's ELF interpreter: the library directories are readable, not
 * executable, so a step that runs /bin/sh must be given its ld.so.
 */
const LOADER = executionFiles("/bin/sh", "/usr/bin:/bin", (detail) => {
  throw new Error(detail);
}).slice(1);

checkNoLeaks();

const runner: ConfineRunner = {
  runtime: RUNTIME,
  binary: realpathSync(process.execPath),
};
const ENV: Record<string, string> = {
  PATH: "/usr/bin:/bin",
  HOME: process.env.HOME ?? "/root",
  MARKER: "kept",
  ...(process.env.DENO_DIR ? { DENO_DIR: process.env.DENO_DIR } : {}),
};
const support = probeConfineSupport(runner, ENV);
const skip = process.platform !== "linux"
  ? "Landlock needs Linux"
  : support.landlockAbi < 6
  ? `Landlock ABI 6 is needed, this kernel has ${support.landlockAbi} (${
    support.error ?? "no error"
  })`
  : undefined;

const root = realpathSync(mkdtempSync(join(tmpdir(), "airlock-confine-")));
const granted = join(root, "granted");
const outside = join(root, "outside");
mkdirSync(granted);
mkdirSync(outside);
writeFileSync(join(granted, "in.txt"), "inside\n");
writeFileSync(join(outside, "secret.txt"), "secret\n");
after(() => rmSync(root, { recursive: true, force: true }));

/**
 * The native step as a file, for running it on the host (in a sandbox,
 * bubblewrap makes it from bytes; here the test may write files).
 */
const nativeElf = nativeConfineElf(process.arch);
const nativeProgram = join(root, "airlock-confine");
if (nativeElf !== undefined) {
  writeFileSync(nativeProgram, nativeElf, { mode: 0o755 });
}

/** Which step a block runs: the runtime's, or the native one. */
type Kind = "runtime" | "native";

/** The step's argv for a spec. */
function stepArgv(kind: Kind, spec: ConfineSpec): string[] {
  return kind === "runtime"
    ? confinedArgv(runner, spec)
    : nativeConfineArgv(nativeProgram, spec);
}

/** Runs a shell script through the confine step with the given grants. */
function sh(
  kind: Kind,
  script: string,
  permissions: Permissions | undefined,
  options: {
    seccomp?: boolean;
    env?: Record<string, string | null>;
    cwd?: string;
  } = {},
): { status: number | null; stdout: string; stderr: string } {
  const spec = confineSpec({
    landlockAbi: support.landlockAbi,
    seccomp: options.seccomp ?? true,
    permissions: resolvePermissions(permissions, granted),
    executables: ["/bin", "/usr/bin", ...LOADER],
    readOnly: [],
    cwd: granted,
    argv: ["sh", "-c", script],
    env: options.env ?? {},
  });
  const argv = stepArgv(kind, spec);
  const result = spawnSync(argv[0] as string, argv.slice(1), {
    cwd: options.cwd ?? granted,
    env: ENV,
    encoding: "utf8",
    timeout: 60_000,
  });
  return {
    status: result.status,
    stdout: String(result.stdout),
    stderr: String(result.stderr),
  };
}

for (const kind of ["runtime", "native"] as const) {
  describe(`confine step (${kind})`, {
    skip: skip ??
      (kind === "native" && nativeElf === undefined
        ? `no native confine step for ${process.arch}`
        : undefined),
  }, () => {
    test(`confine step (${kind}) probe reports the kernel's Landlock ABI and seccomp`, () => {
      assert.equal(support.error, undefined);
      assert.ok(support.landlockAbi >= 6);
      assert.equal(support.seccomp, true);
    });

    test(`confine step (${kind}) runs the command in its directory with the environment unchanged`, () => {
      const result = sh(kind, 'pwd; echo "$MARKER"', { read: ["."] });
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, `${granted}\nkept\n`);
    });

    test(`confine step (${kind}) lets the command read its grant and nothing outside it`, () => {
      const result = sh(
        kind,
        `cat in.txt; cat ${outside}/secret.txt || echo denied; ls / >/dev/null 2>&1 || echo root-denied`,
        { read: ["."] },
      );
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, "inside\ndenied\nroot-denied\n");
      assert.match(result.stderr, /Permission denied/);
    });

    test(`confine step (${kind}) lets the command write its write grant only`, () => {
      const result = sh(
        kind,
        `echo new > made.txt && cat made.txt; echo x > ${outside}/planted.txt || echo denied`,
        { write: ["."] },
      );
      assert.equal(result.status, 0, result.stderr);
      assert.equal(result.stdout, "new\ndenied\n");
      const read = sh(kind, "echo x > made2.txt || echo denied", {
        read: ["."],
      });
      assert.equal(read.stdout, "denied\n");
    });

    test(`confine step (${kind}) keeps the command from signalling its parent or pid 1`, () => {
      const result = sh(
        kind,
        "kill -0 $PPID || echo parent-denied; kill -0 1 || echo init-denied; kill -0 $$ && echo self-ok",
        undefined,
      );
      assert.equal(result.stdout, "parent-denied\ninit-denied\nself-ok\n");
    });

    test(`confine step (${kind}) applies the spec's environment changes`, () => {
      const result = sh(kind, 'echo "${MARKER-unset} $ADDED"', undefined, {
        env: { MARKER: null, ADDED: "added" },
      });
      assert.equal(result.stdout, "unset added\n");
    });

    test(`confine step (${kind}) reads no bunfig.toml or .env of the worker's directory`, () => {
      // A worker that can write its directory plants a preload: it must not
      // run in the step, before confinement.
      writeFileSync(join(granted, "bunfig.toml"), 'preload = ["./evil.ts"]\n');
      writeFileSync(
        join(granted, "evil.ts"),
        `require("node:fs").writeFileSync(${
          JSON.stringify(join(outside, "escaped.txt"))
        }, "x");\n`,
      );
      writeFileSync(join(granted, ".env"), "MARKER=from-dotenv\n");
      try {
        const result = sh(kind, 'echo "$MARKER"', { write: ["."] });
        assert.equal(result.status, 0, result.stderr);
        assert.equal(result.stdout, "kept\n");
        assert.equal(existsSync(join(outside, "escaped.txt")), false);
      } finally {
        for (const name of ["bunfig.toml", "evil.ts", ".env"]) {
          rmSync(join(granted, name), { force: true });
        }
      }
    });

    test(`confine step (${kind}) without seccomp still applies Landlock`, () => {
      const result = sh(
        kind,
        `cat ${outside}/secret.txt || echo denied`,
        undefined,
        {
          seccomp: false,
        },
      );
      assert.equal(result.stdout, "denied\n");
    });

    test(`confine step (${kind}) without Landlock (a kernel before 5.13) installs the seccomp filter alone`, () => {
      const wrapper = landlockWrapper({
        runner,
        support: { landlockAbi: 0, seccomp: true },
        permissions: resolvePermissions(undefined, granted),
        cwd: granted,
        executables: ["/bin", "/usr/bin", ...LOADER],
        stepEnv: {},
        ...(kind === "native" && nativeElf !== undefined
          ? { native: nativeElf }
          : {}),
      });
      assert.equal(wrapper.name, "seccomp");
      const wrapped = wrapper.wrap({
        argv: [
          "sh",
          "-c",
          `cat ${outside}/secret.txt; unshare --user true 2>/dev/null || echo unshare-denied`,
        ],
        env: ENV,
        readOnly: [],
      });
      // On the host the native step is a file of the test's.
      const step = kind === "native"
        ? {
          ...wrapped,
          argv: wrapped.argv.map((arg) =>
            arg === NATIVE_CONFINE_PATH ? nativeProgram : arg
          ),
        }
        : wrapped;
      if (kind === "native") {
        assert.deepEqual(wrapped.embedded?.path, NATIVE_CONFINE_PATH);
      }
      const result = spawnSync(step.argv[0] as string, step.argv.slice(1), {
        cwd: granted,
        env: step.env,
        encoding: "utf8",
        timeout: 60_000,
      });
      assert.equal(result.status, 0, String(result.stderr));
      assert.equal(String(result.stdout), "secret\nunshare-denied\n");
    });

    test(`confine step (${kind}) refuses a malformed spec with its exit code and a message`, () => {
      const argv = kind === "runtime"
        ? confineStepArgv(runner, '{"v":1}')
        : [nativeProgram, "airlock-confine/1", "/", "7,1,0"];
      const result = spawnSync(argv[0] as string, argv.slice(1), {
        cwd: "/",
        env: ENV,
        encoding: "utf8",
      });
      assert.equal(result.status, CONFINE_FAILED_EXIT_CODE);
      assert.ok(
        String(result.stderr).startsWith(
          `${CONFINE_STDERR_PREFIX} Invalid confine spec`,
        ),
        String(result.stderr),
      );
    });

    test(`confine step (${kind}) fails with its exit code when the program cannot be executed`, () => {
      const spec = confineSpec({
        landlockAbi: support.landlockAbi,
        seccomp: true,
        permissions: resolvePermissions(undefined, granted),
        executables: ["/bin", ...LOADER],
        readOnly: [],
        cwd: granted,
        argv: [join(outside, "no-such-program")],
      });
      const argv = stepArgv(kind, spec);
      const result = spawnSync(argv[0] as string, argv.slice(1), {
        cwd: "/",
        env: ENV,
        encoding: "utf8",
      });
      assert.equal(result.status, CONFINE_FAILED_EXIT_CODE);
      assert.match(String(result.stderr), /cannot execute/);
    });
  });
}
