// Attack class: caches shared between workers of different grants (or
// between a worker and the next one). A worker that may write a cache that
// later workers load code from plants code that runs with their grants.
//
// 1. Bun's pre-bundled entry (`$XDG_CACHE_HOME/airlock/bun-entry`) is one
//    file for every Bun worker of every grant. A Bun worker granted write on
//    the cache directory (`write: ["~/.cache"]`) prepended code to it; the
//    next Bun worker, granted only `read: [secrets]`, ran that code and read
//    the secret for it. Fixed within a process: a bundle where a worker of
//    this process may write is not used. Still open across processes (a
//    later parent process trusts the bundle by its stamp): todo below.
// 2. A sandboxed Deno worker's private code cache (`DENO_DIR` =
//    `<DENO_DIR>/airlock-code/<key>`) is writable and kept from one start to
//    the next, so a Deno worker whose native code (ffi) was exploited by the
//    data of one call leaves files for every later worker of the same module
//    and grants: across oneShot calls, restarts and pool recycling (and, with
//    Deno's emit and V8 caches, code). Open: todo below.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import process from "node:process";
import { session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { captureLog, checkNoLeaks, fixture, scratchDir } from "../_helpers.ts";
import { sandboxSkip } from "./_sandbox.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
// A cache of this file's own: the machine's real one is never touched.
const root = scratchDir("cache-poison");
after(() => root[Symbol.dispose]());
const cache = root.join("xdg-cache");
mkdirSync(cache);
process.env.XDG_CACHE_HOME = cache;
const secrets = root.join("secrets");
mkdirSync(secrets);
writeFileSync(root.join("secrets", "s.txt"), "TOPSECRET");

const PLANT = `const dir = arg + "/airlock/bun-entry";
const bundles = fs.existsSync(dir) ? fs.readdirSync(dir).filter((n) => n.endsWith(".js")) : [];
for (const name of bundles) {
  const source = fs.readFileSync(dir + "/" + name, "utf8");
  fs.writeFileSync(dir + "/" + name, 'globalThis.__planted = "planted";\\n' + source);
}
return bundles.length;`;

describe("the Bun entry bundle", { skip: sandboxSkip() }, () => {
  test("a bun worker granted write on the cache plants no code in a later bun worker of this process", async () => {
    {
      await using planter = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: "bun",
        permissions: { write: [cache] },
      });
      // The bundle its own start built: the attack was made.
      const planted = await planter.run(PLANT, cache);
      assert.deepEqual(planted, { ok: true, value: 1 });
    }
    await using victim = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: "bun",
      permissions: { read: [secrets] },
    });
    const seen = await victim.run("return globalThis.__planted ?? 'clean'");
    assert.deepEqual(seen, { ok: true, value: "clean" });
  });

  test("a bundle planted by a worker of another process is not run", {
    todo:
      "open: a later parent trusts the bundle by its stamp, which a worker that could write the bundle can write too; fix: keep the bundle where only airlock's code lies (its own tree) or rebuild once per process",
  }, async () => {
    // Stands for a bundle left by a worker of an earlier process: planted
    // after this process last looked, by a worker it never recorded.
    await using planter = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: "bun",
      permissions: { write: [root.join("secrets")] },
    });
    assert.equal((await planter.run("return 1")).ok, true);
    const dir = `${cache}/airlock/bun-entry`;
    const { readdirSync, readFileSync } = await import("node:fs");
    for (const name of readdirSync(dir).filter((n) => n.endsWith(".js"))) {
      const file = `${dir}/${name}`;
      writeFileSync(
        file,
        `globalThis.__planted = "planted";\n${readFileSync(file, "utf8")}`,
      );
    }
    await using victim = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: "bun",
      permissions: { read: [secrets] },
    });
    const seen = await victim.run("return globalThis.__planted ?? 'clean'");
    assert.deepEqual(seen, { ok: true, value: "clean" });
  });
});

const FFI_WRITE = `const libc = Deno.dlopen("libc.so.6", {
  open: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  read: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
});
const c = (s) => new TextEncoder().encode(s + "\\0");
const environ = new Uint8Array(65536);
const efd = libc.symbols.open(c("/proc/self/environ"), 0, 0);
const n = Number(libc.symbols.read(efd, environ, 65536n));
libc.symbols.close(efd);
const dir = /DENO_DIR=([^\\0]*)/.exec(new TextDecoder().decode(environ.subarray(0, n)))?.[1];
const path = dir + "/left-by-an-earlier-worker";
if (arg === "read") {
  const fd = libc.symbols.open(c(path), 0, 0);
  if (fd < 0) return "nothing";
  const buffer = new Uint8Array(256);
  const got = Number(libc.symbols.read(fd, buffer, 256n));
  libc.symbols.close(fd);
  return new TextDecoder().decode(buffer.subarray(0, got));
}
const fd = libc.symbols.open(c(path), 0o1101, 0o600);
if (fd < 0) return "cannot write";
libc.symbols.write(fd, new TextEncoder().encode(arg), BigInt(arg.length));
libc.symbols.close(fd);
return "written";`;

describe("the Deno code cache", { skip: sandboxSkip() }, () => {
  test("a deno worker leaves nothing in its code cache for the next worker", {
    todo:
      "open: the private code cache is writable and kept between starts of the same module and grants; fix: workers get it read-only (or through a throwaway overlay) and the parent warms it with a start that serves no call",
  }, async () => {
    const options = {
      ...captureLog(),
      runtime: "deno" as const,
      permissions: { ffi: true },
    };
    {
      await using first = await session<typeof evaluate>(worker, options);
      await first.run(FFI_WRITE, "data of the first caller");
    }
    await using next = await session<typeof evaluate>(worker, options);
    const seen = await next.run(FFI_WRITE, "read");
    assert.deepEqual(seen, { ok: true, value: "nothing" });
  });
});
