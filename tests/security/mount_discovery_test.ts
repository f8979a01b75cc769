// Attack class: mount discovery widened by links. A worker with write
// access to its project planted node_modules/evil -> /; on restart airlock
// followed the link and mounted / read-only into the sandbox, so the worker
// read files outside every grant. Mount discovery now resolves links once,
// never mounts /, the user's home or an ancestor of it, ignores links where a
// worker may write, and follows a linked package only inside its workspace.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { session } from "../../mod.ts";
import { workerMounts } from "../../src/runtime/sandbox/mounts.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { sandboxSkip } from "./_sandbox.ts";
import type hostile from "../fixtures/security/hostile_worker.ts";

checkNoLeaks();

const SKIP = sandboxSkip();
const scratch = realpathSync(mkdtempSync(join(tmpdir(), "airlock-mounts-")));
after(() => rmSync(scratch, { recursive: true, force: true }));
const REPO = realpathSync(new URL("../../", import.meta.url));
const HOSTILE_SOURCE = new URL(
  "../fixtures/security/hostile_worker.ts",
  import.meta.url,
);

/** A project of its own holding a copy of the hostile worker. */
function project(name: string): { dir: string; module: string } {
  const dir = join(scratch, name);
  mkdirSync(join(dir, "node_modules"), { recursive: true });
  writeFileSync(join(dir, "package.json"), "{}");
  const module = join(dir, "hostile_worker.ts");
  const worker = new URL("../../worker.ts", import.meta.url).href;
  // The fixture with its imports made absolute.
  const source = readFileSync(HOSTILE_SOURCE, "utf8").replace(
    '"../../../worker.ts"',
    JSON.stringify(worker),
  );
  writeFileSync(module, source);
  return { dir, module };
}

describe("mount discovery", () => {
  test("workerMounts() never mounts / , the home directory or links out of the workspace", () => {
    const home = join(scratch, "home");
    const proj = join(home, "code", "proj");
    mkdirSync(join(proj, "node_modules", "@scope"), { recursive: true });
    writeFileSync(join(home, "package.json"), "{}");
    writeFileSync(join(proj, "package.json"), "{}");
    writeFileSync(join(proj, "w.ts"), "");
    symlinkSync("/", join(proj, "node_modules", "evil"));
    symlinkSync(home, join(proj, "node_modules", "@scope", "home"));
    symlinkSync("/etc", join(proj, "node_modules", "etc"));
    const found = workerMounts({
      runtime: "bun",
      module: join(proj, "w.ts"),
      entry: undefined,
      env: { HOME: home },
    });
    for (const path of found.readOnly) {
      assert.notEqual(path, "/");
      assert.ok(
        !(home === path || home.startsWith(`${path}/`)),
        `${path} shows the home directory`,
      );
      assert.ok(!path.startsWith("/etc"), path);
    }
    assert.ok(found.readOnly.includes(proj));

    // A package.json in the home directory does not make it the project.
    const loose = join(home, "scripts");
    mkdirSync(loose);
    writeFileSync(join(loose, "w.ts"), "");
    const scripts = workerMounts({
      runtime: "bun",
      module: join(loose, "w.ts"),
      entry: undefined,
      env: { HOME: home },
    });
    assert.ok(!scripts.readOnly.includes(home), scripts.readOnly.join());
    assert.ok(scripts.readOnly.includes(loose));

    // node_modules itself a link to /.
    const other = join(scratch, "other");
    mkdirSync(other);
    writeFileSync(join(other, "package.json"), "{}");
    writeFileSync(join(other, "w.ts"), "");
    symlinkSync("/", join(other, "node_modules"));
    const linkedDir = workerMounts({
      runtime: "bun",
      module: join(other, "w.ts"),
      entry: undefined,
      env: { HOME: home },
    });
    assert.ok(!linkedDir.readOnly.includes("/"), linkedDir.readOnly.join());
  });

  test("workerMounts() lets a Bun worker list airlock's root, not read it; a Deno worker neither", () => {
    const entry = join(REPO, "workers", "entry.ts");
    const { module } = project("listing");
    const bun = workerMounts({ runtime: "bun", module, entry, env: {} });
    assert.deepEqual(bun.listOnly, [REPO]);
    assert.ok(!bun.readOnly.includes(REPO), bun.readOnly.join());
    assert.ok(bun.readOnly.includes(join(REPO, "worker.ts")));
    const deno = workerMounts({ runtime: "deno", module, entry, env: {} });
    assert.deepEqual(deno.listOnly, []);
    assert.ok(!deno.readOnly.includes(REPO), deno.readOnly.join());
  });

  test(
    "a Bun worker importing airlock's root worker.ts by path starts with nothing granted and reads no other file of airlock's root",
    {
      skip: SKIP,
    },
    async () => {
      // Bun's resolver lists <root> to import <root>/worker.ts: Landlock
      // allows that listing alone (no read grant on airlock's checkout).
      const { dir, module } = project("root-import");
      await using s = await session<typeof hostile>(pathToFileURL(module), {
        runtime: "bun",
        cwd: dir,
      });
      assert.equal(typeof await s.ownPid(), "number");
      assert.equal((await s.read(join(REPO, "README.md"))).ok, false);
      assert.equal((await s.read(join(REPO, "deno.json"))).ok, false);
      assert.equal(
        (await s.plant(join(REPO, "planted.txt"), "x")).ok,
        false,
        "nothing written in airlock's root",
      );
    },
  );

  test(
    "a worker that plants node_modules/evil -> / reads nothing more after a restart",
    {
      skip: SKIP,
    },
    async () => {
      const secretDir = join(scratch, "secret");
      mkdirSync(secretDir);
      const secret = join(secretDir, "secret.txt");
      writeFileSync(secret, "outside-secret");
      const { dir, module } = project("planted");
      // A Bun worker: Deno refuses symlinks under scoped write grants.
      await using s = await session<typeof hostile>(pathToFileURL(module), {
        runtime: "bun",
        permissions: { write: [dir] },
        cwd: dir,
      });
      assert.equal((await s.read(secret)).ok, false, "before");
      assert.deepEqual(
        await s.link("/", join(dir, "node_modules", "evil")),
        { ok: true, value: "linked" },
      );
      await s.restart();
      assert.equal((await s.read(secret)).ok, false, "by its own path");
      assert.equal(
        (await s.read(join(dir, "node_modules", "evil", secret))).ok,
        false,
        "through the link",
      );
      assert.equal((await s.list("/etc")).ok, false, "the host's /etc");
    },
  );
});
