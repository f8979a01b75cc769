// The sandbox's host facts: the first start's probes (bubblewrap's, the
// confine step's, each a process) run off the parent's event loop, so the
// command build that follows reads them from the cache (issue 23, item 4).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needs, needsSandbox } from "../_helpers/tools.ts";
import { detect } from "../../src/runtime/detect.ts";
import { resolveWorkerOptions } from "../../src/parent/_resolve_options.ts";
import { hostFacts } from "../../src/runtime/sandbox/facts.ts";
import {
  nativeConfineElf,
  RUNTIME_CONFINE_STEP_ENV,
} from "../../src/runtime/sandbox/native_step.ts";

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
          // A cache of its own: the machine's may hold the probes already
          // (tests/security/probe_cache_test.ts tests that one).
          env: {
            ...process.env,
            NO_COLOR: "1",
            XDG_CACHE_HOME: join(root.path, "cache"),
          },
          timeout: 120_000,
        },
      );
      const report = JSON.parse(out.trim().split("\n").at(-1) ?? "") as {
        before: string;
        yieldsBefore: number;
        after: string;
        ticks: number;
      };
      // A fresh process has no probe cached; after the prefetch the build
      // needs none, and the timer kept firing while the probes ran.
      assert.equal(report.before, "probe needed");
      // Its first walk of the facts is steps (issue 23 item 4): a turn may
      // come between the lookups, the probe command, each file the probe
      // cache's key stats and the cache's read.
      assert.ok(report.yieldsBefore >= 10, `${report.yieldsBefore} yields`);
      assert.equal(report.after, "answered");
      assert.ok(report.ticks >= 1, `${report.ticks} firings during the probes`);
    },
  );
});

describe("hostFacts() with bubblewrap", needs("bwrap"), () => {
  test("hostFacts() takes what the kernel offers from the native step's probe in bubblewrap, with no runtime start", () => {
    const adapter = detect();
    const module = join(root.path, "w2.ts");
    writeFileSync(module, "export default {};\n");
    const input = resolveWorkerOptions(pathToFileURL(module), {
      sandbox: "os",
    }, adapter);
    const request = {
      module: input.label,
      runtime: "bun" as const,
      sandbox: input.sandbox,
      permissions: input.permissions,
      local: true,
      compiledDeno: false,
    };
    // A runtime that cannot start: its probe would fail, the native one runs.
    const binary = join(root.path, "no-such-runtime");
    const facts = hostFacts(request, {
      adapter,
      input,
      binary,
      runtime: "bun",
    });
    assert.ok(facts.bwrap !== undefined && "path" in facts.bwrap);
    assert.equal(
      facts.nativeStep,
      nativeConfineElf(process.arch) !== undefined,
    );
    if (facts.nativeStep !== true) return;
    const step = facts.confineStep;
    assert.ok(step !== undefined && "runner" in step, JSON.stringify(step));
    assert.equal(step.runner.binary, binary);
    assert.ok(step.support.landlockAbi >= 0);
    // Without the native step, that runtime's probe is what answers: it fails.
    const forced = hostFacts(request, {
      adapter: {
        ...adapter,
        env: (name) =>
          name === RUNTIME_CONFINE_STEP_ENV ? "1" : adapter.env(name),
      },
      input,
      binary,
      runtime: "bun",
    });
    assert.equal(forced.nativeStep, false);
    assert.ok(
      forced.confineStep !== undefined && "unavailable" in forced.confineStep,
    );
  });
});

describe("a sandboxed session's parent", needsSandbox(), () => {
  test("a parent making many calls to a sandboxed worker writes nothing to its stderr", () => {
    // Deno spawns a worker whose descriptor 3 carries the native step
    // through node:child_process: a ref() or unref() of that descriptor's
    // socket on every call once queued listeners until Node's warning.
    const script = fixture("sandbox/many_calls_parent.ts").pathname;
    const worker = fixture("basic_worker.ts").href;
    const result = spawnSync(
      process.execPath,
      RUNTIME === "bun"
        ? [script, worker]
        : ["run", "-A", "--quiet", script, worker],
      {
        encoding: "utf8",
        env: { ...process.env, NO_COLOR: "1" },
        timeout: 120_000,
      },
    );
    assert.equal(result.status, 0, String(result.stderr));
    assert.equal(String(result.stderr), "");
  });
});
