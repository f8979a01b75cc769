// The sandbox's host facts: the first start's probes (bubblewrap's, the
// confine step's, each a process) run off the parent's event loop, so the
// command build that follows reads them from the cache (issue 23, item 4).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsSandbox } from "../_helpers/tools.ts";

const root = scratchDir("facts");
after(() => root[Symbol.dispose]());

describe("prefetchHostFacts()", () => {
  test(
    "prefetchHostFacts() makes every probe the build needs without blocking the event loop",
    needsSandbox(),
    () => {
      const module = join(root.path, "w.ts");
      writeFileSync(module, "export default {};\n");
      const script = fixture("sandbox/prefetch_parent.ts").pathname;
      const out = execFileSync(
        process.execPath,
        RUNTIME === "bun"
          ? [script, pathToFileURL(module).href]
          : ["run", "-A", "--quiet", script, pathToFileURL(module).href],
        {
          encoding: "utf8",
          env: { ...process.env, NO_COLOR: "1" },
          timeout: 120_000,
        },
      );
      const report = JSON.parse(out.trim().split("\n").at(-1) ?? "") as {
        before: string;
        after: string;
        ticks: number;
      };
      // A fresh process has no probe cached; after the prefetch the build
      // needs none, and the timer kept firing while the probes ran.
      assert.equal(report.before, "probe needed");
      assert.equal(report.after, "answered");
      assert.ok(report.ticks >= 1, `${report.ticks} firings during the probes`);
    },
  );
});
