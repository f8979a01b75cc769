// Attack class: the sandbox switching itself off. A Deno parent run with
// the README's own flags could not look bubblewrap up (accessSync needs
// --allow-sys); the failure was swallowed and the worker ran with Deno's
// flags only. Now the lookup needs only read access, the README's run line
// is tested as it is written, and a lookup the parent may not make is a
// PermissionError naming the cause and the fix, never "no sandbox".
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import process from "node:process";
import { sandboxSkip } from "./_sandbox.ts";

const SKIP = sandboxSkip();
const REPO = realpathSync(fileURLToPath(new URL("../../", import.meta.url)));
const DENO = realpathSync(join(REPO, "node_modules", ".bin", "deno"));
const PARENT = fileURLToPath(
  new URL("../fixtures/security/run_line_parent.ts", import.meta.url),
);
const scratch = realpathSync(mkdtempSync(join(tmpdir(), "airlock-runline-")));
after(() => rmSync(scratch, { recursive: true, force: true }));
const secret = join(scratch, "secret.json");
writeFileSync(secret, '{"password":"hunter2"}');

/** The run line as the README writes it: `deno run <flags> main.ts`. */
function readmeFlags(): string[] {
  const readme = readFileSync(join(REPO, "README.md"), "utf8");
  const match = /`deno run ((?:--allow-[a-z]+ )+)main\.ts`/.exec(readme);
  assert.ok(match?.[1], "the README has a deno run line");
  return match[1].trim().split(" ");
}

interface Report {
  started: boolean;
  imported?: boolean;
  name?: string;
  permission?: string | null;
  message?: string;
}

function runParent(flags: string[], runtime: "deno" | "bun"): Report {
  const out = execFileSync(DENO, [
    "run",
    "--no-prompt",
    ...flags,
    PARENT,
    runtime,
    pathToFileURL(secret).href,
  ], {
    encoding: "utf8",
    cwd: scratch,
    timeout: 120_000,
    env: {
      PATH: process.env.PATH ?? "/usr/bin:/bin",
      HOME: process.env.HOME ?? "/root",
    },
  });
  return JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as Report;
}

describe("the README's run line and failed probes", () => {
  for (const runtime of ["deno", "bun"] as const) {
    test(
      `a Deno parent with exactly the README's flags starts a sandboxed ${runtime} worker`,
      {
        skip: SKIP,
      },
      () => {
        const report = runParent(readmeFlags(), runtime);
        assert.deepEqual(report, { started: true, imported: false });
      },
    );
  }

  test(
    "a Deno parent that may not look bubblewrap up fails with a PermissionError, never runs unsandboxed",
    {
      skip: SKIP,
    },
    () => {
      // Read access to the code only: not to PATH's directories.
      const code = [REPO, realpathSync(join(REPO, "node_modules")), scratch];
      const report = runParent([
        "--allow-run",
        "--allow-env",
        `--allow-read=${code.join(",")}`,
      ], "deno");
      assert.equal(report.started, false, JSON.stringify(report));
      assert.equal(report.name, "PermissionError", report.message ?? "");
      assert.equal(report.permission, "sandbox");
      assert.match(report.message ?? "", /--allow-read/);
    },
  );
});
