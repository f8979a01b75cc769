// The README's examples as written: the quick start (its worker and its
// parent), the three modes, and the Python worker with the relative paths
// its command names, each copied out of README.md into a fresh project and
// run as the README says (Deno with the minimum flags it names, `bun
// main.ts`). Only the import of `@airlock/airlock` is mapped to this
// checkout (deno.json imports, tsconfig.json paths); the data the examples
// query is made first (the README says the data directory must exist).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needs, needsWorkers } from "../_helpers/tools.ts";

checkNoLeaks();

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const readme = readFileSync(join(root, "README.md"), "utf8");
const scratch = mkdtempSync(join(tmpdir(), "airlock-readme-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

/** The README's fenced code blocks, in order, with their info strings. */
function blocks(): { info: string; code: string }[] {
  const found: { info: string; code: string }[] = [];
  const fence = /^```([^\n]*)\n([\s\S]*?)^```$/gm;
  for (const match of readme.matchAll(fence)) {
    found.push({ info: match[1] ?? "", code: match[2] ?? "" });
  }
  return found;
}

/** The block whose first line is `first`, and the index after it. */
function block(first: string): { code: string; next: number } {
  const all = blocks();
  const index = all.findIndex((b) => b.code.split("\n")[0] === first);
  assert.notEqual(index, -1, `README.md has a block starting ${first}`);
  return { code: all[index]!.code, next: index + 1 };
}

/** The first `ts` block at or after `from` (the parent of an example). */
function tsBlockAfter(from: number): string {
  const found = blocks().slice(from).find((b) => /^ts\b/.test(b.info));
  assert.ok(found, "a ts block follows");
  return found.code;
}

/** A fresh project whose `@airlock/airlock` is this checkout. */
function project(name: string, files: Record<string, string>): string {
  const dir = join(scratch, `${name}-${RUNTIME}`);
  mkdirSync(join(dir, "data"), { recursive: true });
  const mod = join(root, "mod.ts");
  const worker = join(root, "worker.ts");
  writeFileSync(
    join(dir, "deno.json"),
    JSON.stringify({
      imports: {
        "@airlock/airlock": `file://${mod}`,
        "@airlock/airlock/worker": `file://${worker}`,
      },
    }),
  );
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        paths: {
          "@airlock/airlock": [mod],
          "@airlock/airlock/worker": [worker],
        },
      },
    }),
  );
  for (const [path, code] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    writeFileSync(join(dir, path), code);
  }
  return dir;
}

/** The data the examples query: data/app.db with a table of 3 items. */
function seed(dir: string): void {
  const db = new DatabaseSync(join(dir, "data", "app.db"));
  db.exec("create table items (id integer primary key, name text)");
  db.exec("insert into items (name) values ('a'), ('b'), ('c')");
  db.close();
}

function tool(name: "bun" | "deno"): string {
  const local = join(root, "node_modules", ".bin", name);
  return existsSync(local) ? local : name;
}

/** Runs main.ts of a project as the README says, on this runtime. */
function runMain(
  dir: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const argv = RUNTIME === "deno"
    ? [
      tool("deno"),
      "run",
      "--allow-run",
      "--allow-read",
      "--allow-env",
      "main.ts",
    ]
    : [tool("bun"), "main.ts"];
  const env: Record<string, string> = { NO_COLOR: "1" };
  for (const name of ["PATH", "HOME", "DENO_DIR", "XDG_CACHE_HOME"]) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  return new Promise((resolve) => {
    execFile(
      argv[0]!,
      argv.slice(1),
      { cwd: dir, env, timeout: 90_000, killSignal: "SIGKILL" },
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

describe("README examples, as written", needsWorkers(), () => {
  const worker = block("// workers/db.ts").code;

  test(`the quick start runs on ${RUNTIME}`, async () => {
    const { code: main } = block("// main.ts");
    const dir = project("quick-start", {
      "workers/db.ts": worker,
      "main.ts": main,
    });
    seed(dir);
    const result = await runMain(dir);
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    assert.match(result.stdout, /n: 3/);
  });

  test(`the three modes run on ${RUNTIME}`, async () => {
    const modes = blocks().find((b) =>
      b.code.startsWith(
        'import { oneShot, pool, session } from "@airlock/airlock";',
      )
    );
    assert.ok(modes, "README.md has the three modes' block");
    const dir = project("modes", {
      "workers/db.ts": worker,
      "main.ts": modes.code,
    });
    seed(dir);
    const result = await runMain(dir);
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
  });

  test(
    `the Python worker runs on ${RUNTIME} with the relative paths of its command`,
    needs("python3"),
    async () => {
      const python = block("# workers/db.py");
      const parent = tsBlockAfter(python.next);
      assert.match(parent, /"vendor\/airlock_worker\.py", "workers\/db\.py"/);
      const dir = project("python", {
        "workers/db.py": python.code,
        "main.ts": parent,
      });
      // "vendor the package ... and its launcher ... side by side"
      const vendored = join(root, "workers", "python");
      cpSync(
        join(vendored, "airlock_worker.py"),
        join(dir, "vendor", "airlock_worker.py"),
      );
      cpSync(
        join(vendored, "airlock_worker"),
        join(dir, "vendor", "airlock_worker"),
        {
          recursive: true,
          filter: (path) => !path.includes("__pycache__"),
        },
      );
      seed(dir);
      const result = await runMain(dir);
      // It exits 0 once db.count("items") has answered.
      assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    },
  );
});
