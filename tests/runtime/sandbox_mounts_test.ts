// What a sandboxed worker gets mounted, found on disk without running it:
// findExecutable() (src/runtime/launch/executable.ts), denoCacheMounts() and
// workerMounts() (src/runtime/sandbox/mounts.ts).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findExecutable } from "../../src/runtime/launch/executable.ts";
import {
  denoCacheMounts,
  workerMounts,
} from "../../src/runtime/sandbox/mounts.ts";
import { refuse } from "./_bwrap.ts";

describe("findExecutable(), denoCacheMounts() and workerMounts()", () => {
  const root = mkdtempSync(join(tmpdir(), "airlock-sandbox-"));
  after(() => rmSync(root, { recursive: true, force: true }));

  test("findExecutable() finds an executable file on PATH only", () => {
    const bin = realpathSync(mkdtempSync(join(root, "bin-")));
    const other = realpathSync(mkdtempSync(join(root, "other-")));
    writeFileSync(join(other, "bwrap"), "#!/bin/sh\n");
    chmodSync(join(other, "bwrap"), 0o644);
    assert.equal(
      findExecutable("bwrap", { path: `${bin}:${other}` }, refuse),
      undefined,
      "not executable",
    );
    writeFileSync(join(bin, "bwrap"), "#!/bin/sh\n");
    chmodSync(join(bin, "bwrap"), 0o755);
    assert.equal(
      findExecutable("bwrap", { path: `relative:${bin}` }, refuse),
      join(bin, "bwrap"),
    );
    assert.equal(
      findExecutable("bwrap", { path: undefined }, refuse),
      undefined,
    );
  });

  test("findExecutable() resolves node_modules/.bin links to the real binary", () => {
    const project = realpathSync(mkdtempSync(join(root, "project-")));
    const pkg = join(project, "node_modules", "tool", "bin");
    mkdirSync(pkg, { recursive: true });
    mkdirSync(join(project, "node_modules", ".bin"));
    writeFileSync(join(pkg, "tool.exe"), "#!/bin/sh\n");
    chmodSync(join(pkg, "tool.exe"), 0o755);
    symlinkSync(
      "../tool/bin/tool.exe",
      join(project, "node_modules", ".bin", "tool"),
    );
    const inner = join(project, "src", "deep");
    mkdirSync(inner, { recursive: true });
    assert.equal(
      findExecutable("tool", { path: "", from: [inner] }, refuse),
      join(pkg, "tool.exe"),
    );
  });

  test("denoCacheMounts() follows DENO_DIR, then XDG_CACHE_HOME, then HOME", () => {
    assert.deepEqual(denoCacheMounts({ DENO_DIR: "/d/", HOME: "/h" }), {
      denoDir: "/d",
      readOnly: ["/d/remote", "/d/npm"],
    });
    assert.equal(
      denoCacheMounts({ XDG_CACHE_HOME: "/x", HOME: "/h" })?.denoDir,
      "/x/deno",
    );
    assert.equal(denoCacheMounts({ HOME: "/h" })?.denoDir, "/h/.cache/deno");
    assert.equal(
      denoCacheMounts({ DENO_DIR: "rel", HOME: "/h" })?.denoDir,
      "/h/.cache/deno",
    );
    assert.equal(denoCacheMounts({}), undefined);
  });

  test("workerMounts() finds the module's project, node_modules, linked packages, configs and airlock's code", () => {
    const proj = join(root, "proj");
    const pkg = join(root, "airlock");
    const linked = join(root, "linked-pkg");
    mkdirSync(join(proj, "workers", "db"), { recursive: true });
    mkdirSync(join(proj, "node_modules", "@scope"), { recursive: true });
    mkdirSync(join(proj, "data", "B"), { recursive: true });
    mkdirSync(linked);
    mkdirSync(join(pkg, "workers"), { recursive: true });
    mkdirSync(join(pkg, "src"));
    mkdirSync(join(pkg, "tests"));
    writeFileSync(join(proj, "workers", "db", "worker.ts"), "");
    writeFileSync(join(proj, "package.json"), "{}");
    writeFileSync(join(proj, "deno.json"), "{}");
    writeFileSync(join(pkg, "workers", "entry.ts"), "");
    writeFileSync(join(pkg, "worker.ts"), "");
    // A workspace: the linked package lies inside its root.
    writeFileSync(join(root, "pnpm-workspace.yaml"), "");
    symlinkSync(linked, join(proj, "node_modules", "@scope", "linked"));
    symlinkSync(join(root, "missing"), join(proj, "node_modules", "dangling"));

    const found = workerMounts({
      runtime: "deno",
      module: join(proj, "workers", "db", "worker.ts"),
      entry: join(pkg, "workers", "entry.ts"),
      config: join(proj, "deno.json"),
      env: { DENO_DIR: join(root, "deno-dir") },
    });
    const expected = [
      proj,
      join(proj, "deno.json"),
      join(proj, "package.json"),
      join(proj, "node_modules"),
      linked,
      join(pkg, "workers"),
      join(pkg, "src"),
      join(pkg, "worker.ts"),
    ];
    assert.deepEqual([...found.readOnly].sort(), [...expected].sort());
    assert.equal(found.denoDir, join(root, "deno-dir"));
    assert.ok(
      !found.readOnly.includes(root),
      "the project, not what is above it",
    );
    assert.ok(!found.readOnly.includes(join(pkg, "tests")));

    mkdirSync(join(root, "deno-dir", "npm"), { recursive: true });
    const bun = workerMounts({
      runtime: "bun",
      module: join(proj, "workers", "db", "worker.ts"),
      entry: join(pkg, "workers", "entry.ts"),
      env: { DENO_DIR: join(root, "deno-dir") },
    });
    assert.equal(bun.denoDir, undefined);
    assert.ok(!bun.readOnly.includes(join(root, "deno-dir", "npm")));
    const deno = workerMounts({
      runtime: "deno",
      module: undefined,
      entry: undefined,
      env: { DENO_DIR: join(root, "deno-dir") },
    });
    assert.deepEqual(deno.readOnly, [join(root, "deno-dir", "npm")]);
  });
});
