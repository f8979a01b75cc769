// The sandbox's probes kept per machine (issue 23 item 2;
// src/runtime/sandbox/probe_cache.ts): a second process pays no probe, and
// nothing kept there can widen confinement: an answer that would narrow the
// sandbox (no Landlock, an older ABI, bubblewrap unusable) is probed again,
// and a cache someone else, or a worker of the process, may write is not
// used.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool, needs } from "../_helpers/tools.ts";
import { RUNTIME_CONFINE_STEP_ENV } from "../../src/runtime/sandbox/native_step.ts";

const root = scratchDir("probe-cache");
after(() => root[Symbol.dispose]());

const module = join(root.path, "w.ts");
writeFileSync(module, "export default {};\n");

interface Report {
  before: string;
  after: string;
  forgotten?: string;
}

/** A fresh parent's probes with its cache under `cacheHome`. */
function freshParent(
  cacheHome: string,
  env: Record<string, string> = {},
): Report {
  const script = fixture("sandbox/prefetch_parent.ts").pathname;
  const url = pathToFileURL(module).href;
  const out = execFileSync(
    process.execPath,
    RUNTIME === "bun" ? [script, url] : ["run", "-A", "--quiet", script, url],
    {
      encoding: "utf8",
      env: {
        ...process.env,
        NO_COLOR: "1",
        XDG_CACHE_HOME: cacheHome,
        ...env,
      },
      timeout: 120_000,
    },
  );
  return JSON.parse(out.trim().split("\n").at(-1) ?? "") as Report;
}

/** A cache home whose probes a first process made (and kept). */
function warmedHome(
  name: string,
  env: Record<string, string> = {},
): { home: string; file: string } {
  const home = join(root.path, name);
  mkdirSync(home);
  const first = freshParent(home, env);
  assert.equal(first.before, "probe needed");
  assert.equal(first.after, "answered");
  const file = join(home, "airlock", "probes-v1.json");
  assert.ok(existsSync(file), "the answers are kept");
  return { home, file };
}

/** Rewrites every kept answer of a kind. */
function rewrite(file: string, kind: string, value: unknown): void {
  const entries = JSON.parse(readFileSync(file, "utf8")) as Record<
    string,
    { value: unknown }
  >;
  let found = 0;
  for (const [key, entry] of Object.entries(entries)) {
    if ((JSON.parse(key) as string[])[0] === kind) {
      entry.value = value;
      found++;
    }
  }
  assert.ok(found > 0, `no kept ${kind} answer`);
  writeFileSync(file, JSON.stringify(entries), { mode: 0o600 });
}

describe("the probes kept per machine", needs("landlock"), () => {
  test("a second process of the same program pays no probe; the cache is private", () => {
    const { home, file } = warmedHome("second");
    assert.equal(statSync(join(home, "airlock")).mode & 0o777, 0o700);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    const second = freshParent(home);
    assert.equal(second.before, "answered");
  });

  test("a kept answer that would narrow the sandbox is probed again, never used", () => {
    // No or an older Landlock would make a Deno worker fall back to its
    // flags, or drop rules (scopes): probed again, and the real answer kept.
    const step = warmedHome("narrow-step");
    for (
      const claim of [
        { landlockAbi: 0, seccomp: true },
        { landlockAbi: 5, seccomp: true },
        { landlockAbi: 6, seccomp: false },
        { landlockAbi: 6, seccomp: true, error: "planted" },
      ]
    ) {
      rewrite(step.file, "step", claim);
      assert.equal(freshParent(step.home).before, "probe needed");
      assert.equal(freshParent(step.home).before, "answered", "re-kept");
    }
    if (hasTool("bwrap")) {
      // With the native step, one probe answers for bubblewrap and the
      // kernel (a "step" answer, above); with the runtime's step,
      // bubblewrap has an answer of its own.
      const runtimeStep = { [RUNTIME_CONFINE_STEP_ENV]: "1" };
      const bwrap = warmedHome("narrow-bwrap", runtimeStep);
      rewrite(bwrap.file, "bwrap", { usable: false, reason: "planted" });
      assert.equal(freshParent(bwrap.home, runtimeStep).before, "probe needed");
      assert.equal(freshParent(bwrap.home, runtimeStep).before, "answered");
    }
  });

  test("a cache someone else may write, or a link, is not read", () => {
    const open = warmedHome("open");
    chmodSync(join(open.home, "airlock"), 0o777);
    assert.equal(freshParent(open.home).before, "probe needed");
    chmodSync(join(open.home, "airlock"), 0o700);
    chmodSync(open.file, 0o666);
    assert.equal(freshParent(open.home).before, "probe needed");
    const linked = warmedHome("linked");
    const elsewhere = join(linked.home, "elsewhere.json");
    renameSync(linked.file, elsewhere);
    symlinkSync(elsewhere, linked.file);
    assert.equal(freshParent(linked.home).before, "probe needed");
  });

  test("a cache a worker of the process may write is neither read nor written", () => {
    const { home } = warmedHome("granted");
    const granted = freshParent(home, {
      FIXTURE_WRITE_GRANT: join(home, "airlock"),
    });
    assert.equal(granted.before, "probe needed");
    assert.equal(granted.after, "answered");
    // A grant of the whole cache home covers it too.
    const fresh = join(root.path, "granted-fresh");
    mkdirSync(fresh);
    freshParent(fresh, { FIXTURE_WRITE_GRANT: fresh });
    assert.ok(!existsSync(join(fresh, "airlock", "probes-v1.json")));
  });

  test("a start that fails in a sandbox wrapper forgets the kept answers", () => {
    const { home, file } = warmedHome("forget");
    const report = freshParent(home, { FIXTURE_FORGET: "1" });
    assert.equal(report.before, "answered");
    assert.equal(report.forgotten, "probe needed");
    assert.ok(!existsSync(file));
  });
});
