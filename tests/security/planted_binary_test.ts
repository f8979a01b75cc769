// Attack class: a planted runtime binary. A Bun worker wrote
// node_modules/.bin/deno in its project; a later runtime: "deno" worker
// started that file, unsandboxed, as the parent's user. Executables are now
// looked up once, resolved to their real path, and never taken from where a
// worker of this process was granted write access; a program that does not
// exist is a spawn failure at once.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import {
  findExecutable,
  recordWorkerWritable,
} from "../../src/runtime/launch/executable.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsSandbox } from "../_helpers/tools.ts";

checkNoLeaks();

const scratch = realpathSync(mkdtempSync(join(tmpdir(), "airlock-planted-")));
after(() => rmSync(scratch, { recursive: true, force: true }));

const REPO = realpathSync(fileURLToPath(new URL("../../", import.meta.url)));
const BUN = realpathSync(join(REPO, "node_modules", ".bin", "bun"));
const PARENT = fileURLToPath(
  new URL("../fixtures/security/planting_parent.ts", import.meta.url),
);

function plant(path: string): void {
  writeFileSync(path, "#!/bin/sh\ntouch /tmp/airlock-pwned\n");
  chmodSync(path, 0o755);
}

function refusal(detail: string): never {
  throw new Error(detail);
}

describe("planted binaries", () => {
  test("findExecutable() refuses a binary under a worker's write grant, on PATH and in node_modules/.bin", () => {
    const project = join(scratch, "project");
    const bin = join(project, "node_modules", ".bin");
    mkdirSync(bin, { recursive: true });
    plant(join(bin, "deno"));
    recordWorkerWritable([project]);
    assert.throws(
      () => findExecutable("deno", { path: "", from: [project] }, refusal),
      /refusing to run .*could have planted it/,
    );
    assert.throws(
      () => findExecutable("deno", { path: bin }, refusal),
      /refusing to run/,
    );
  });

  test("findExecutable() refuses a link whose target lies under a worker's write grant", () => {
    const writable = join(scratch, "writable");
    const safe = join(scratch, "safe");
    mkdirSync(writable);
    mkdirSync(safe);
    plant(join(writable, "bun"));
    symlinkSync(join(writable, "bun"), join(safe, "bun"));
    recordWorkerWritable([writable]);
    assert.throws(
      () => findExecutable("bun", { path: safe }, refusal),
      /refusing to run/,
    );
  });

  test("findExecutable() takes a binary outside every write grant, by its real path", () => {
    const elsewhere = join(scratch, "elsewhere");
    mkdirSync(elsewhere);
    plant(join(elsewhere, "tool.exe"));
    symlinkSync("tool.exe", join(elsewhere, "tool"));
    assert.equal(
      findExecutable("tool", { path: elsewhere }, refusal),
      join(elsewhere, "tool.exe"),
    );
  });
});

describe("a planted runtime binary, end to end", () => {
  test(
    "a Bun worker plants node_modules/.bin/deno; the parent's next deno worker refuses it instead of running it",
    {
      ...needsSandbox(),
    },
    () => {
      const project = join(scratch, "victim-project");
      mkdirSync(join(project, "node_modules", ".bin"), { recursive: true });
      writeFileSync(join(project, "package.json"), "{}");
      const marker = join(scratch, "pwned");
      const out = execFileSync(BUN, [PARENT, project, marker], {
        encoding: "utf8",
        cwd: project,
        timeout: 120_000,
        // No deno on PATH: the lookup reaches node_modules/.bin.
        env: { PATH: "/usr/bin:/bin", HOME: process.env.HOME ?? "/root" },
      });
      const report = JSON.parse(out.trim().split("\n").at(-1) ?? "{}");
      assert.equal(existsSync(marker), false, "the planted binary ran");
      assert.equal(report.started, false, JSON.stringify(report));
      assert.equal(report.name, "PermissionError", report.message);
      assert.match(report.message, /could have planted it/);
    },
  );
});
