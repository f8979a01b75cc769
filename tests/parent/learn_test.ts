// Learn mode (unstable_learn.ts): one run finds what a Deno worker touched.
import { after, describe, test } from "node:test";
import process from "node:process";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { session } from "../../mod.ts";
import {
  learnPermissions,
  type Permissions,
  permissionsFromAudit,
} from "../../unstable_learn.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";

checkNoLeaks();

const dir = realpathSync(mkdtempSync(join(tmpdir(), "airlock-learn-test-")));
after(() => rmSync(dir, { recursive: true, force: true }));

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The permissions without one scope (or kind) of them. */
function without(
  permissions: Permissions,
  kind: keyof Permissions,
  scope: string | true,
): Permissions {
  const copy: Record<string, unknown> = { ...permissions };
  const scopes = copy[kind];
  if (scope === true || !Array.isArray(scopes)) delete copy[kind];
  else {
    const rest = scopes.filter((s) => s !== scope);
    if (rest.length > 0) copy[kind] = rest;
    else delete copy[kind];
  }
  return copy as Permissions;
}

describe("learnPermissions()", needsWorkers("deno"), () => {
  test("learnPermissions() suggests the accesses a Deno worker needs, each entry needed", async () => {
    const call = ["work", join(dir, "data.txt")] as const;
    const learned = await learnPermissions(fixture("learn_worker.ts"), {
      calls: [call],
      env: { DB_URL: "postgres://db" },
      cwd: dir,
    });
    // DB_URL is given in env, so readable without a grant; Deno's audit
    // records a write check beside the read, and the read beside the write:
    // both are needed, under Deno's flags.
    assert.deepEqual(learned.permissions, {
      read: ["./data.txt"],
      write: ["./data.txt"],
      sys: ["hostname"],
    });
    assert.ok(learned.accesses.some((a) => a.permission === "env"));
    assert.ok(learned.removed.some((a) => a.permission === "env") === false);
    // The suggestion works pasted in as it is, and without any one entry
    // the worker fails (or answers otherwise).
    const run = async (permissions: Permissions) => {
      await using s = await session(fixture("learn_worker.ts"), {
        runtime: "deno",
        permissions,
        env: { DB_URL: "postgres://db" },
        cwd: dir,
        onStderr: () => {},
      });
      return await s.call(call[0], [call[1]]);
    };
    const answer = await run(learned.permissions);
    assert.deepEqual(answer, ["x", "postgres://db", true]);
    for (const [kind, scopes] of Object.entries(learned.permissions)) {
      for (
        const scope of (scopes as unknown) === true
          ? [true]
          : scopes as string[]
      ) {
        const fewer = without(
          learned.permissions,
          kind as keyof Permissions,
          scope as string | true,
        );
        const outcome = await run(fewer).then(
          (value) => ({ value }),
          (error: unknown) => ({ error }),
        );
        assert.ok(
          "error" in outcome ||
            JSON.stringify(outcome.value) !== JSON.stringify(answer),
          `the worker passed without ${kind} ${String(scope)}`,
        );
      }
    }
    resolvePermissions(learned.permissions, dir);
  });

  test("learnPermissions() grants the directory of a file the calls made and deleted", async () => {
    mkdirSync(join(dir, "scratch"), { recursive: true });
    // The audit sees the scratch file, but the next run's has another name
    // and this one is gone: a grant on it is skipped at start (or refused,
    // inside a directory a worker may write).
    const learned = await learnPermissions(fixture("scratch_learn_worker.ts"), {
      calls: [["scratch", "./scratch"]],
      cwd: dir,
      maxRuns: 12,
    });
    assert.deepEqual(learned.permissions, {
      read: ["./scratch"],
      write: ["./scratch"],
    });
  });

  test(
    "learnPermissions() grants the directory its calls name when a failure names nothing",
    needsWorkers("bun"),
    async () => {
      const data = join(dir, "opaque");
      mkdirSync(data, { recursive: true });
      // On Bun: no audit to see the write first, as for native code.
      const learned = await learnPermissions(
        fixture("opaque_learn_worker.ts"),
        {
          calls: [["save", "./opaque"]],
          cwd: dir,
          runtime: "bun",
        },
      );
      assert.deepEqual(learned.permissions.write, ["./opaque"]);
      assert.ok(learned.refused.some((a) => a.value === "./opaque"));
    },
  );

  test(
    RUNTIME === "deno"
      ? "learnPermissions() from a parent with the README's minimum flags finds what lmdb's native code needs"
      : "learnPermissions() from a Bun parent finds what lmdb's native code needs on Deno",
    needsWorkers("deno"),
    async () => {
      const data = join(dir, `lmdb-${RUNTIME}`);
      mkdirSync(join(data, "db"), { recursive: true });
      const parent = fileURLToPath(fixture("learn_parent.ts"));
      // A Bun parent's worker stderr is a socket: the sandboxed runs' audit
      // goes to a file there.
      const [program, args] = RUNTIME === "deno"
        ? [join(root, "node_modules", ".bin", "deno"), [
          "run",
          "--allow-run",
          "--allow-read",
          "--allow-env",
          parent,
          data,
        ]]
        : [process.execPath, [parent, data]];
      const result = await new Promise<{ code: number; out: string }>(
        (resolve) =>
          execFile(
            program,
            args,
            { timeout: 240_000, env: { ...process.env, NO_COLOR: "1" } },
            (error, stdout, stderr) =>
              resolve({
                code: error ? 1 : 0,
                out: `${stdout}${error ? stderr : ""}`,
              }),
          ),
      );
      assert.equal(result.code, 0, result.out);
      const learned = JSON.parse(result.out.trim().split("\n").at(-1)!) as {
        permissions: Record<string, string[] | true>;
      };
      const addon = realpathSync(
        join(
          root,
          "node_modules",
          "@lmdb",
          `lmdb-${process.platform}-${process.arch}`,
        ),
      );
      // detect-libc reads /usr/bin/ldd once /proc/self/exe is refused, and
      // then never lists the network interfaces (process.report): no sys,
      // no net.
      assert.deepEqual(learned.permissions, {
        read: [addon, "./db", "/usr/bin/ldd"],
        write: ["./db"],
        ffi: [addon],
      });
      // Pasted in as it is, it runs the real client.
      await using s = await session(fixture("lmdb_learn_worker.ts"), {
        runtime: "deno",
        permissions: learned.permissions as Permissions,
        cwd: data,
        onStderr: () => {},
      });
      await s.call("open", ["./db"]);
      assert.equal(await s.call("roundTrip", ["k2", "v2"]), "v2");
    },
  );

  test("permissionsFromAudit() skips airlock's own variables, its audit file and lines that are not entries", () => {
    const log = [
      '{"v":1,"permission":"env","value":"NO_COLOR"}',
      '{"v":1,"permission":"env","value":"DENO_AUDIT_PERMISSIONS"}',
      '{"v":1,"permission":"write","value":"/tmp/learn/audit.jsonl"}',
      "not json",
      '{"v":1,"permission":"net","value":"db.internal:5432"}',
      '{"v":1,"permission":"net","value":"db.internal:5432"}',
      '{"v":1,"permission":"read","value":"/srv/ref/data.bin"}',
    ].join("\n");
    const learned = permissionsFromAudit(log, "/app", ["/tmp/learn"]);
    assert.deepEqual(learned.permissions, {
      read: ["/srv/ref/data.bin"],
      net: ["db.internal:5432"],
    });
    assert.equal(learned.accesses.length, 2);
  });
});
