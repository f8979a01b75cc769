// Attack class: changing the metadata of files outside the grants (mode,
// times, owner, extended attributes; issue 24 item 5). A worker, run by the
// file's owner, made a file outside its grants world-readable (chmod 0666)
// and reset its times: under bubblewrap the path is not there (or is a
// read-only mount); under Landlock alone 0.2 let it through (Landlock checks
// no chmod, utimes, chown or setxattr), and as root that reaches every
// root-owned file (/etc/shadow 0666). Now, where Landlock is alone, the
// seccomp filter refuses the path-based calls (chmod, fchmodat, fchmodat2,
// chown, lchown, fchownat, utime, utimes, futimesat, utimensat with a path,
// the setxattr and removexattr family): a worker changes metadata only
// through a descriptor, which Landlock gives only on its grants. Native
// code through the FFI. Runs with bubblewrap and Landlock, and (second CI
// pass) with Landlock alone.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  chmodSync,
  mkdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { spawnSync } from "node:child_process";
import process from "node:process";
import { PermissionError, session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool } from "../_helpers/tools.ts";
import { sandboxSkip } from "./_sandbox.ts";
import { NATIVE_PRELUDE } from "./_native.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
const SKIP = sandboxSkip();
/** Whether the tests (and so their workers) run as root. */
const ROOT = process.geteuid?.() === 0;

/** chmod, chown, utimes and setxattr on `arg`, natively (the FFI). */
const CHANGE = `${NATIVE_PRELUDE}
const path = cstr(arg);
const done = [];
if (sys("chmod", path, 0o666).result === 0) done.push("chmod");
if (sys("chown", path, 12345, 12345).result === 0) done.push("chown");
const value = cstr("x");
if (sys("setxattr", path, cstr("user.airlock"), value, 1n, 0).result === 0) {
  done.push("setxattr");
}
try {
  fs.utimesSync(arg, 1, 1);
  done.push("utimes");
} catch {
  // refused
}
return done;`;

/** The same through descriptors the worker opened (its grants only). */
const CHANGE_OWN = `
const fd = fs.openSync(arg, "r+");
fs.fchmodSync(fd, 0o640);
fs.futimesSync(fd, 2, 2);
fs.closeSync(fd);
return fs.statSync(arg).mode & 0o777;`;

const MOD = new URL("../../mod.ts", import.meta.url);
// The runtime by its node_modules/.bin link: Deno's node:child_process
// rewrites an argument equal to its own binary's path.
const BINARY = new URL(`../../node_modules/.bin/${RUNTIME}`, import.meta.url)
  .pathname;
const AS_NOBODY = ["--reuid", "65534", "--regid", "65534", "--clear-groups"];

/**
 * Why a parent cannot be run as nobody here: it takes root to switch, and
 * bubblewrap, the runtime and this checkout must be reachable by nobody
 * (a checkout under /root is not).
 */
function nonRootSkip(): string | false {
  if (!ROOT) {
    return "the tests do not run as root (they cannot switch to nobody)";
  }
  if (!hasTool("bwrap")) return "bubblewrap is missing";
  const files = [BINARY, MOD.pathname];
  const check = spawnSync("setpriv", [
    ...AS_NOBODY,
    "/bin/sh",
    "-c",
    'test -x "$1" && test -r "$2"',
    "sh",
    ...files,
  ]);
  return check.status === 0
    ? false
    : `nobody cannot run ${files[0]} or read ${files[1]}`;
}

function options(permissions: Record<string, unknown>) {
  return {
    ...captureLog(),
    runtime: RUNTIME,
    // Deno's own flags refuse chmod without a write grant; native code is
    // what the OS sandbox alone must stop.
    permissions: RUNTIME === "deno"
      ? { ...permissions, ffi: true }
      : permissions,
  };
}

describe("metadata outside the grants", { skip: SKIP }, () => {
  test(`a ${RUNTIME} worker cannot chmod, chown, touch or setxattr a file outside its write grants`, async () => {
    using dir = scratchDir("metadata");
    const outside = dir.join("secret.txt");
    const readable = dir.join("read", "r.txt");
    mkdirSync(dir.join("read"));
    for (const file of [outside, readable]) {
      writeFileSync(file, "secret");
      chmodSync(file, 0o600);
    }
    const before = [outside, readable].map((file) => statSync(file));
    await using s = await session<typeof evaluate>(
      worker,
      options({ read: [dir.join("read")] }),
    );
    for (const [index, file] of [outside, readable].entries()) {
      const outcome = await s.run(CHANGE, file);
      assert.deepEqual(outcome, { ok: true, value: [] }, file);
      const after = statSync(file);
      assert.equal(after.mode & 0o777, 0o600);
      assert.equal(after.uid, before[index]?.uid);
      assert.equal(after.mtimeMs, before[index]?.mtimeMs);
    }
  });

  test(`a ${RUNTIME} worker changes the metadata of a file in its write grant through a descriptor`, async () => {
    using dir = scratchDir("metadata-own");
    const own = dir.join("own.txt");
    writeFileSync(own, "mine");
    chmodSync(own, 0o600);
    await using s = await session<typeof evaluate>(
      worker,
      options({ read: [dir.path], write: [dir.path] }),
    );
    assert.deepEqual(await s.run(CHANGE_OWN, own), { ok: true, value: 0o640 });
    assert.equal(statSync(own).mtimeMs, 2000);
  });

  // Deno's node:fs chmods a file by path after appending to it; with the
  // path forms refused where Landlock is alone, every Deno worker appending
  // to a log failed with EPERM (the whole suite's second CI pass). The
  // worker's entry retries such a chmod through a descriptor opened for
  // writing, which Landlock checks: its write grants only.
  test(`a ${RUNTIME} worker appends with node:fs and chmods by path in its write grant, never outside it`, async () => {
    using dir = scratchDir("metadata-append");
    for (const sub of ["own", "drop", "read"]) mkdirSync(dir.join(sub));
    const own = dir.join("own", "log.txt");
    const created = dir.join("own", "new.txt");
    // Written, never read: Deno's flags refuse a stat there.
    const dropped = dir.join("drop", "log.txt");
    const readable = dir.join("read", "r.txt");
    for (const file of [own, dropped, readable]) {
      writeFileSync(file, "start\n");
      chmodSync(file, 0o600);
    }
    await using s = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: {
        read: [dir.join("own"), dir.join("read")],
        write: [dir.join("own"), dir.join("drop")],
      },
    });
    const outcome = await s.run(
      `fs.appendFileSync(arg.own, "more\\n");
fs.appendFileSync(arg.created, "new\\n");
fs.appendFileSync(arg.dropped, "more\\n");
fs.chmodSync(arg.own, 0o640);
const refused = (f) => { try { f(); return "changed"; } catch (e) { return e.code ?? e.name; } };
return {
  own: fs.statSync(arg.own).mode & 0o777,
  created: fs.readFileSync(arg.created, "utf8"),
  readable: refused(() => fs.chmodSync(arg.readable, 0o666)),
};`,
      { own, created, dropped, readable },
    );
    assert.deepEqual(outcome, {
      ok: true,
      value: {
        own: 0o640,
        created: "new\n",
        // Deno's own flags refuse it first; then the OS sandbox.
        readable: RUNTIME === "deno"
          ? "NotCapable"
          : hasTool("bwrap")
          ? "EROFS"
          : "EPERM",
      },
    });
    assert.equal(readFileSync(own, "utf8"), "start\nmore\n");
    assert.equal(readFileSync(dropped, "utf8"), "start\nmore\n");
    assert.equal(statSync(readable).mode & 0o777, 0o600);
  });

  test(`permissions.metadata "strict" starts a ${RUNTIME} worker only where every metadata change outside the write grants is refused (bubblewrap)`, async () => {
    using dir = scratchDir("metadata-strict");
    const readable = dir.join("r.txt");
    writeFileSync(readable, "mine");
    chmodSync(readable, 0o600);
    const start = session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: {
        read: [dir.path],
        metadata: "strict",
        ...(RUNTIME === "deno" ? { ffi: true } : {}),
      },
    });
    if (!hasTool("bwrap") || ROOT) {
      const error = await start.then(() => undefined, (e: unknown) => e);
      assert.ok(error instanceof PermissionError, String(error));
      assert.equal(error.permission, "sandbox");
      assert.match(error.message, /permissions\.metadata "strict"/);
      return;
    }
    await using s = await start;
    // The descriptor form, which Landlock alone lets through: refused here.
    const outcome = await s.run(
      "const fd = fs.openSync(arg, 'r'); try { fs.fchmodSync(fd, 0o666); return 'changed'; } finally { fs.closeSync(fd); }",
      readable,
    );
    assert.notDeepEqual(outcome, { ok: true, value: "changed" });
    assert.equal(statSync(readable).mode & 0o777, 0o600);
  });

  // The root check read a member the parent's process facade does not
  // have, so every parent counted as root and "strict" was refused for an
  // ordinary user too. A parent run as nobody starts such a worker.
  test(
    `permissions.metadata "strict" starts a ${RUNTIME} worker under bubblewrap for a parent not run as root`,
    {
      skip: nonRootSkip(),
    },
    () => {
      using dir = scratchDir("metadata-nonroot");
      chmodSync(dir.path, 0o777);
      const parent = dir.join("parent.ts");
      writeFileSync(
        parent,
        `import { session } from ${JSON.stringify(MOD.href)};
try {
  await using s = await session(${
          JSON.stringify(fixture("basic_worker.ts").href)
        }, { runtime: ${
          JSON.stringify(RUNTIME)
        }, permissions: { metadata: "strict" } });
  console.log(await s.call("add", [2, 3]));
} catch (error) {
  console.log(String(error));
}
`,
      );
      const result = spawnSync("setpriv", [
        ...AS_NOBODY,
        process.execPath,
        ...(RUNTIME === "deno" ? ["run", "-A", parent] : [parent]),
      ], {
        encoding: "utf8",
        timeout: 60_000,
        env: {
          PATH: "/usr/local/bin:/usr/bin:/bin",
          HOME: dir.path,
          DENO_DIR: dir.join("deno"),
          XDG_CACHE_HOME: dir.join("cache"),
        },
      });
      assert.equal(result.stdout.trim(), "5", result.stdout + result.stderr);
    },
  );

  // Red team: bubblewrap binds the host's /dev/null, /dev/zero, /dev/full,
  // /dev/random, /dev/urandom and /dev/tty writable, and /proc's entries
  // are the host's: a worker run as root, granted nothing, changed their
  // mode, owner and times through a descriptor (fchmod /dev/null 0 breaks
  // the whole host) with "strict" accepted. Strict now refuses a root
  // worker; run by an ordinary user the device nodes are root's.
  test(`permissions.metadata "strict" refuses a ${RUNTIME} worker run as root (the host's /dev/null is writable in bubblewrap)`, async () => {
    const start = session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: {
        metadata: "strict",
        ...(RUNTIME === "deno" ? { ffi: true } : {}),
      },
    });
    if (ROOT || !hasTool("bwrap")) {
      const error = await start.then(() => undefined, (e: unknown) => e);
      assert.ok(error instanceof PermissionError, String(error));
      assert.equal(error.permission, "sandbox");
      assert.match(
        error.message,
        ROOT && hasTool("bwrap") ? /run as root/ : /without bubblewrap/,
      );
      return;
    }
    await using s = await start;
    const before = statSync("/dev/null");
    // The same mode: a no-op if it were allowed, refused (EPERM) here.
    const outcome = await s.run(
      `const fd = fs.openSync("/dev/null", "r"); try { fs.fchmodSync(fd, ${
        before.mode & 0o7777
      }); return "changed"; } finally { fs.closeSync(fd); }`,
      "",
    );
    assert.notDeepEqual(outcome, { ok: true, value: "changed" });
  });
});
