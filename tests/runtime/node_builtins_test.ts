// Importing @airlock/airlock must not start Deno's Node compatibility (about
// 25 ms of CPU at start): the node: built-ins load on first use
// (src/runtime/node_builtins.ts). Runs under both runners: it runs deno.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  statSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { fileURLToPath } from "node:url";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { join } from "node:path";
import {
  availableParallelism,
  Buffer,
  delimiter,
  fileKind,
  fileURLToPath as lazyFileURLToPath,
  posix,
  process as lazyProcess,
  readdirSync,
  signalConstants,
  spawnSync,
} from "../../src/runtime/node_builtins.ts";
import process from "node:process";

const root = fileURLToPath(new URL("../../", import.meta.url));
const local = join(root, "node_modules", ".bin", "deno");
const deno = existsSync(local) ? local : "deno";

interface InfoModule {
  specifier: string;
  dependencies?: { specifier: string; code?: unknown }[];
}

describe("node built-ins on the import path", () => {
  test("mod.ts's module graph has no node: import that loads at run time", () => {
    const info = JSON.parse(
      execFileSync(deno, ["info", "--json", join(root, "mod.ts")], {
        encoding: "utf8",
        env: { ...process.env, NO_COLOR: "1" },
      }),
    ) as { modules: InfoModule[] };
    const eager = info.modules.flatMap((module) =>
      (module.dependencies ?? [])
        .filter((dep) => dep.specifier.startsWith("node:") && dep.code)
        .map((dep) => `${module.specifier} imports ${dep.specifier}`)
    );
    assert.deepEqual(eager, []);
  });

  test("importing mod.ts on Deno never touches the process global", () => {
    const out = execFileSync(
      deno,
      ["run", "--quiet", fixture("import_trap.ts").pathname],
      { encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } },
    );
    assert.equal(out.trim(), "untouched");
  });

  test("the lazy bindings answer as node's own do", () => {
    assert.equal(lazyProcess.platform, process.platform);
    assert.equal(lazyProcess.arch, process.arch);
    assert.equal(delimiter, process.platform === "win32" ? ";" : ":");
    assert.equal(signalConstants().SIGKILL, 9);
    assert.ok(availableParallelism() >= 1);
    assert.ok(readdirSync(root).includes("mod.ts"));
    assert.equal(lazyFileURLToPath("file:///a/b"), "/a/b");
    assert.equal(posix.join("/a", "../b"), "/b");
    assert.equal(Buffer.from([104, 105]).toString("base64"), "aGk=");
    assert.equal(spawnSync("true").status, 0);
  });
});

describe("fileKind()", () => {
  test("fileKind() tells a file, anything else and a missing path apart as node:fs statSync does", () => {
    using dir = scratchDir("kinds");
    const at = (name: string): string => join(dir.path, name);
    writeFileSync(at("file"), "export default {};\n");
    writeFileSync(at("empty"), "");
    writeFileSync(at("epoch"), "x");
    utimesSync(at("epoch"), 0, 0); // mtime 0: a time, not "missing"
    writeFileSync(at("4096"), "x".repeat(4096)); // a directory's size
    mkdirSync(at("dir"));
    symlinkSync(at("file"), at("link-file"));
    symlinkSync(at("dir"), at("link-dir"));
    symlinkSync(at("nothing"), at("dangling"));
    const fifo = spawnSync("mkfifo", [at("fifo")]).status === 0;
    const paths = [
      "file",
      "empty",
      "epoch",
      "4096",
      "dir",
      "dir/",
      "link-file",
      "link-dir",
      "dangling",
      "nothing",
      "file/below",
      ...(fifo ? ["fifo"] : []),
    ].map(at);
    for (const path of [...paths, "/dev/null", "/", "/proc/self/status"]) {
      let expected: string;
      try {
        expected = statSync(path).isFile() ? "file" : "other";
      } catch {
        expected = "missing";
      }
      assert.equal(fileKind(path), expected, path);
    }
  });
});
