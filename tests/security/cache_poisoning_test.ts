// Attack class: caches shared between workers of different grants (or
// between a worker and the next one). A worker that may write a cache that
// later workers load code from plants code that runs with their grants.
//
// 1. Bun's pre-bundled entry was one file for every Bun worker of every
//    grant, cached in `$XDG_CACHE_HOME/airlock/bun-entry`. A Bun worker
//    granted write on the cache directory (`write: ["~/.cache"]`) prepended
//    code to it; the next Bun worker, granted only `read: [secrets]`, ran
//    that code and read the secret for it, in the same parent and in a later
//    parent process (which trusted the bundle by a stamp beside it). Fixed:
//    the bundle is built once per process into a private directory, checked
//    against the hash kept in the parent's memory before every start, and
//    not used where a worker of this process may write.
// 2. A sandboxed Deno worker's private code cache (`DENO_DIR` =
//    `<DENO_DIR>/airlock-code/<key>`) was writable and kept from one start to
//    the next, so a Deno worker whose native code (ffi) was exploited by the
//    data of one call left files for every later worker of the same module
//    and grants: across oneShot calls, restarts and pool recycling (and, with
//    Deno's emit and V8 caches, code). Fixed: workers get it read-only; the
//    parent fills it with a warm-up start that has no grants.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { realpathSync } from "node:fs";
import process from "node:process";
import { session } from "../../mod.ts";
import {
  BUILD_BUN_ENTRY_ENV,
  builtBunEntryBundle,
} from "../../src/runtime/bun_entry.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { bwrapSkip, sandboxSkip } from "./_sandbox.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
const bun = realpathSync(
  fileURLToPath(new URL("../../node_modules/.bin/bun", import.meta.url)),
);

/** The parent's Deno cache directory (as airlock finds it). */
function denoDir(): string {
  if (process.env.DENO_DIR) return process.env.DENO_DIR;
  const cache = process.env.XDG_CACHE_HOME ??
    join(process.env.HOME ?? "/", ".cache");
  return join(cache, "deno");
}
// A cache of this file's own: the machine's real one is never touched.
const root = scratchDir("cache-poison");
after(() => root[Symbol.dispose]());
const cache = root.join("xdg-cache");
mkdirSync(cache);
process.env.XDG_CACHE_HOME = cache;
const secrets = root.join("secrets");
mkdirSync(secrets);
writeFileSync(root.join("secrets", "s.txt"), "TOPSECRET");

const PLANT = `const source = fs.readFileSync(arg, "utf8");
fs.writeFileSync(arg, 'globalThis.__planted = "planted";\\n' + source);
return "written";`;

let bundle: string | undefined;

/** The bundle this process's Bun workers run (asked of the first one). */
async function bundlePath(): Promise<string> {
  if (bundle !== undefined) return bundle;
  const argv = async (): Promise<string[]> => {
    await using s = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: "bun",
    });
    const ran = await s.run("return [process.argv0, ...process.argv]");
    assert.equal(ran.ok, true);
    return (ran as { value: string[] }).value;
  };
  // bun --no-env-file <workers/bun_loader.ts> <bundle> <sha256> <module>, or
  // for the first Bun worker of the process, which starts the build:
  // bun --no-env-file <workers/entry.ts> <module>
  let seen = await argv();
  if (!/\/bun_loader\.[jt]s$/.test(seen[2] ?? "")) {
    await builtBunEntryBundle(
      seen[1] ?? "",
      seen[2] ?? "",
      process.env,
      () => {},
    );
    seen = await argv();
  }
  assert.match(seen[2] ?? "", /\/bun_loader\.[jt]s$/, seen.join(" "));
  bundle = seen[3] ?? "";
  return bundle;
}

describe("the Bun entry bundle", { skip: sandboxSkip() }, () => {
  // The Bun bundle built per process (where the checked-in one does not
  // match its sources) is the one a worker of another program could reach
  // in the temporary directory: these tests attack that one. The checked-in
  // one lies in airlock's tree (tests/security/bun_bundle_test.ts).
  let saved: string | undefined;
  before(() => {
    saved = process.env[BUILD_BUN_ENTRY_ENV];
    process.env[BUILD_BUN_ENTRY_ENV] = "1";
  });
  after(() => {
    if (saved === undefined) delete process.env[BUILD_BUN_ENTRY_ENV];
    else process.env[BUILD_BUN_ENTRY_ENV] = saved;
  });
  test("a bundle planted by a worker of another process is not run", async () => {
    // The bundle is built per process into a private directory; a worker of
    // another program granted write on the temporary directory could still
    // rewrite it there. Stands for that worker: this process rewrites the
    // bundle its first Bun worker ran.
    const file = await bundlePath();
    assert.match(file, /\/bun-entry\/entry-[0-9a-f]+\.js$/);
    // Never under the shared cache directory, which a later process would
    // find again.
    assert.ok(!file.startsWith(cache), file);
    writeFileSync(
      file,
      `globalThis.__planted = "planted";\n${readFileSync(file, "utf8")}`,
    );
    await using victim = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: "bun",
      permissions: { read: [secrets] },
    });
    const seen = await victim.run("return globalThis.__planted ?? 'clean'");
    assert.deepEqual(seen, { ok: true, value: "clean" });
  });

  test("a bundle rewritten after the parent's check is refused by the worker itself, never run", async () => {
    // The race the parent's check leaves: a worker of another program
    // (granted write on the temporary directory) rewrites the bundle after
    // the parent checked it and before Bun reads it. The loader checks the
    // bytes it runs against the parent's hash.
    using dir = scratchDir("bun-loader");
    const file = await bundlePath();
    const original = readFileSync(file);
    const sha256 = createHash("sha256").update(original).digest("hex");
    const planted = dir.join("entry-planted.js");
    const marker = dir.join("ran");
    writeFileSync(
      planted,
      `require("node:fs").writeFileSync(${
        JSON.stringify(marker)
      }, "planted");\n${original.toString("utf8")}`,
    );
    const loader = fileURLToPath(
      new URL("../../workers/bun_loader.ts", import.meta.url),
    );
    const module = worker.href;
    const result = spawnSync(
      bun,
      ["--no-env-file", loader, planted, sha256, module],
      { encoding: "utf8", input: "", timeout: 60_000 },
    );
    assert.equal(result.status, 3, result.stderr);
    assert.match(result.stderr, /is not the one the parent built/);
    assert.equal(existsSync(marker), false, "the planted code ran");
    // The bundle itself, with its hash, starts (and ends at end of input).
    const clean = spawnSync(
      bun,
      ["--no-env-file", loader, file, sha256, module],
      { encoding: "utf8", input: "", timeout: 60_000 },
    );
    assert.notEqual(clean.status, 3, clean.stderr);
    assert.doesNotMatch(clean.stderr, /not the one the parent built/);
    // A bundle gone or emptied is refused too, never a crash or a fallback.
    const empty = dir.join("entry-empty.js");
    writeFileSync(empty, "");
    for (const path of [dir.join("entry-missing.js"), empty]) {
      const gone = spawnSync(
        bun,
        ["--no-env-file", loader, path, sha256, module],
        { encoding: "utf8", input: "", timeout: 60_000 },
      );
      assert.equal(gone.status, 3, gone.stderr);
      assert.match(
        gone.stderr,
        /cannot read the pre-bundled entry|is not the one the parent built/,
      );
    }
  });

  test("a bun worker granted write where the bundle lies plants no code in a later bun worker of this process", async () => {
    const file = await bundlePath();
    {
      await using planter = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: "bun",
        permissions: { write: [dirname(dirname(file))] },
      });
      const planted = await planter.run(PLANT, file);
      // The attack was made.
      assert.deepEqual(planted, { ok: true, value: "written" });
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
  test("a deno worker leaves nothing in its code cache for the next worker", async () => {
    const options = {
      ...captureLog(),
      runtime: "deno" as const,
      permissions: { ffi: true },
    };
    {
      await using first = await session<typeof evaluate>(worker, options);
      // Its native code cannot write there: the cache is read-only.
      assert.deepEqual(
        await first.run(FFI_WRITE, "data of the first caller"),
        { ok: true, value: "cannot write" },
      );
    }
    await using next = await session<typeof evaluate>(worker, options);
    const seen = await next.run(FFI_WRITE, "read");
    assert.deepEqual(seen, { ok: true, value: "nothing" });
  });

  test("the warm-up that fills a deno worker's code cache has none of the worker's grants or environment", async () => {
    // A new module, so a new cache that is warmed for this test. Its code
    // writes a file into the write grant at import, if it may, holding the
    // token of its environment: only the worker itself may.
    using dir = scratchDir("warm-up");
    const out = dir.join("out");
    mkdirSync(out);
    const module = dir.join("warm_worker.ts");
    writeFileSync(
      module,
      `import { defineWorker } from ${
        JSON.stringify(new URL("../../worker.ts", import.meta.url).href)
      };
let wrote = "no";
try {
  Deno.writeTextFileSync(
    ${JSON.stringify(out)} + "/" + crypto.randomUUID(),
    Deno.env.get("AIRLOCK_TEST_TOKEN") ?? "no environment",
  );
  wrote = "yes";
} catch {
  // Not granted.
}
export default defineWorker({ wrote: () => wrote });
`,
    );
    await using s = await session<{ wrote(): string }>(pathToFileURL(module), {
      ...captureLog(),
      runtime: "deno",
      permissions: { write: [out] },
      env: { AIRLOCK_TEST_TOKEN: "tenant-a" },
    });
    assert.equal(await s.wrote(), "yes");
    assert.deepEqual(
      readdirSync(out).map((name) => readFileSync(join(out, name), "utf8")),
      ["tenant-a"],
    );
    // The warm-up ran: the module's cache holds its compiled code and the
    // parent's mark.
    const caches = join(denoDir(), "airlock-code");
    const mine = readdirSync(caches).filter((key) =>
      existsSync(join(caches, key, "gen", "file", `${module}.js`))
    );
    assert.equal(mine.length, 1, `caches holding ${module}`);
    assert.ok(existsSync(join(caches, mine[0] as string, "airlock-warmed")));
  });
});

/** Reads the worker's own DENO_DIR (its runtime's environment) through ffi. */
const OWN_DENO_DIR = `const libc = Deno.dlopen("libc.so.6", {
  open: { parameters: ["buffer", "i32", "i32"], result: "i32" },
  read: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
});
const environ = new Uint8Array(65536);
const efd = libc.symbols.open(new TextEncoder().encode("/proc/self/environ\\0"), 0, 0);
const n = Number(libc.symbols.read(efd, environ, 65536n));
libc.symbols.close(efd);
return /DENO_DIR=([^\\0]*)/.exec(new TextDecoder().decode(environ.subarray(0, n)))?.[1] ?? "none";`;

// Last in this file: once a worker of this process may write the cache, no
// later worker of it uses the cache. Needs bubblewrap: its grant covers the
// confine step's cache (<DENO_DIR>/airlock-confine), so Landlock is refused
// for the rest of the process and, without bubblewrap, every later Deno
// worker of it refuses to start (sandbox_fallback_test, in a process of its
// own), which would fail the files Bun runs after this one in its process.
describe("the Deno code cache and a worker's write grant", {
  skip: bwrapSkip(),
}, () => {
  test("a deno worker granted write on an ancestor of the code cache (~/.cache) plants nothing a later deno worker of this process finds", async () => {
    const options = {
      ...captureLog(),
      runtime: "deno" as const,
      permissions: { ffi: true },
    };
    // The cache the workers of this module use until then.
    let shared: string;
    {
      await using first = await session<typeof evaluate>(worker, options);
      const dir = await first.run(OWN_DENO_DIR);
      assert.equal(dir.ok, true);
      shared = String((dir as { value: unknown }).value);
      assert.match(shared, /\/airlock-code\/[0-9a-f]{32}$/);
    }
    // The directory holding the parent's DENO_DIR (~/.cache by default).
    const ancestor = dirname(denoDir());
    assert.ok(shared.startsWith(`${ancestor}/`), shared);
    const planted = join(shared, "left-by-an-earlier-worker");
    // Removed at the end: the test cache is shared with other test files.
    using _cleanup = {
      [Symbol.dispose]: () => rmSync(planted, { force: true }),
    };
    {
      // Granted write on the cache's ancestor: its grant covers the cache,
      // and it writes there (the grant is honoured).
      await using planter = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: "deno",
        permissions: { write: [ancestor], ffi: true },
      });
      const own = await planter.run(OWN_DENO_DIR);
      assert.equal(own.ok, true);
      // It does not run from the shared cache itself.
      assert.notEqual((own as { value: unknown }).value, shared);
      assert.deepEqual(
        await planter.run(
          `fs.writeFileSync(arg, "planted"); return "written";`,
          planted,
        ),
        { ok: true, value: "written" },
      );
    }
    // A later worker with other grants: not from the cache the planter could
    // write, so it finds nothing of the planter's.
    await using victim = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: "deno",
      permissions: { read: [secrets], ffi: true },
    });
    const dir = await victim.run(OWN_DENO_DIR);
    assert.equal(dir.ok, true);
    assert.notEqual((dir as { value: unknown }).value, shared);
    assert.deepEqual(await victim.run(FFI_WRITE, "read"), {
      ok: true,
      value: "nothing",
    });
  });
});
