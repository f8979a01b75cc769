// Attack class: the worker's environment acting outside the sandbox.
//
// 1. The confine step (Landlock + seccomp) runs on the worker's runtime
//    before anything is confined. It used to run with the worker's whole
//    environment, so a variable meant for the worker ran code in the step:
//    with `BUN_OPTIONS=--preload=<a file in a write grant>` or `LD_PRELOAD`
//    naming a library in a write grant, a hostile worker planted the file
//    and, on the next start, its code ran unconfined (with bubblewrap
//    unusable: as the user, outside every rule; it wrote outside its grant).
//    The step now receives the worker's variables under a held name and
//    gives them back only at exec, after confinement.
// 2. Variables given to a bubblewrap-confined worker travelled as
//    `--setenv NAME VALUE` on bubblewrap's command line, which every process
//    of the machine can read in /proc/<pid>/cmdline for the worker's whole
//    life (`ps aux` showed a `DB_PASSWORD`). They now reach it through its
//    environment; only the dynamic loader's variables stay on the command
//    line, so that bubblewrap itself never loads a worker's library.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";
import { sandboxSkip } from "./_sandbox.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");

/** The `Seccomp:` and `NoNewPrivs:` lines of every process that logged. */
function logged(log: string): string[] {
  return existsSync(log)
    ? readFileSync(log, "utf8").split("\n").filter((line) => line !== "")
    : [];
}

/** A preload that logs whether the process that runs it is confined. */
function preloadSource(log: string): string {
  return `try {
  const fs = require("node:fs");
  const status = fs.readFileSync("/proc/self/status", "utf8");
  const seccomp = /Seccomp:\\s*(\\d)/.exec(status)?.[1];
  fs.appendFileSync(${JSON.stringify(log)}, "seccomp=" + seccomp + "\\n");
} catch (error) {
  try { require("node:fs").appendFileSync(${
    JSON.stringify(log)
  }, "failed " + error + "\\n"); } catch {}
}
`;
}

const LIBRARY_SOURCE = `#include <fcntl.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void logged(void) {
  char status[8192] = {0};
  int in = open("/proc/self/status", O_RDONLY);
  if (in >= 0) { read(in, status, sizeof status - 1); close(in); }
  const char *line = strstr(status, "Seccomp:");
  char out[64] = "seccomp=?\\n";
  if (line) { const char *p = line + 8; while (*p == ' ' || *p == '\\t') p++; out[8] = *p; }
  int log = open(LOG, O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (log >= 0) { write(log, out, strlen(out)); close(log); }
}
`;

describe("the worker's environment never acts before confinement", () => {
  for (const runtime of ["bun", "deno"] as const) {
    test(
      `a ${runtime} worker's LD_PRELOAD library in its write grant loads only confined`,
      needs("landlock", "cc"),
      async () => {
        using dir = scratchDir("env-ldpreload");
        const log = dir.join("seccomp.log");
        writeFileSync(dir.join("logged.c"), LIBRARY_SOURCE);
        execFileSync("cc", [
          "-shared",
          "-fPIC",
          `-DLOG=${JSON.stringify(log)}`,
          "-o",
          dir.join("logged.so"),
          dir.join("logged.c"),
        ]);
        await using s = await session<typeof evaluate>(worker, {
          ...captureLog(),
          runtime,
          env: { LD_PRELOAD: dir.join("logged.so") },
          permissions: { write: [dir.path] },
        });
        const seen = await s.run("return process.env.LD_PRELOAD");
        assert.deepEqual(seen, { ok: true, value: dir.join("logged.so") });
        const lines = logged(log);
        assert.ok(lines.length > 0, "the worker loaded the library");
        // Seccomp mode 2: the filter was installed before the library ran.
        assert.deepEqual(
          lines.filter((line) => line !== "seccomp=2"),
          [],
          "a process loaded the worker's library before confinement",
        );
      },
    );
  }

  test(
    "a bun worker's BUN_OPTIONS preload, planted in its write grant, runs only confined",
    needs("landlock"),
    async () => {
      using dir = scratchDir("env-preload");
      const log = dir.join("seccomp.log");
      const preload = dir.join("preload.js");
      writeFileSync(preload, "");
      await using s = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: "bun",
        env: { BUN_OPTIONS: `--preload=${preload}` },
        permissions: { write: [dir.path] },
      });
      // The hostile worker plants code in the preload its environment names.
      const planted = await s.run(
        "fs.writeFileSync(arg.preload, arg.source); return 'planted'",
        { preload, source: preloadSource(log) },
      );
      assert.deepEqual(planted, { ok: true, value: "planted" });
      await s.restart();
      const lines = logged(log);
      assert.ok(lines.length > 0, "the new worker ran the preload");
      assert.deepEqual(
        lines.filter((line) => line !== "seccomp=2"),
        [],
        "a process ran the planted preload before confinement",
      );
    },
  );
});

describe("the worker's environment is not on any command line", () => {
  for (const runtime of ["deno", "bun"] as const) {
    test(
      `a ${runtime} worker's variables are not readable in /proc/<pid>/cmdline`,
      { skip: sandboxSkip() },
      async () => {
        const secret = `airlock-secret-${crypto.randomUUID()}`;
        await using s = await session<typeof evaluate>(worker, {
          ...captureLog(),
          runtime,
          env: { DB_PASSWORD: secret },
        });
        const seen = await s.run("return process.env.DB_PASSWORD");
        assert.deepEqual(seen, { ok: true, value: secret });
        const exposed: string[] = [];
        for (const entry of readdirSync("/proc")) {
          if (!/^\d+$/.test(entry)) continue;
          try {
            const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8");
            if (cmdline.includes(secret)) {
              exposed.push(`${entry}: ${cmdline.split("\0")[0]}`);
            }
          } catch {
            // Gone meanwhile.
          }
        }
        assert.deepEqual(exposed, [], "the secret is on a command line");
      },
    );
  }
});
