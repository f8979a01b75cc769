import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  isGranted,
  type PermissionsOption,
  resolvePermissions,
} from "../../src/runtime/permissions.ts";
import { denoPermissionFlags } from "../../src/runtime/launch/deno_command.ts";

const CWD = "/srv/app";

/** Calls resolvePermissions with a value its type would not allow. */
function resolveUnchecked(input: unknown, optionName?: string) {
  return resolvePermissions(input as PermissionsOption, CWD, optionName);
}

describe("resolvePermissions()", () => {
  test("resolvePermissions() grants nothing by default", () => {
    assert.deepEqual(resolvePermissions(undefined, CWD), {
      all: false,
      read: [],
      write: [],
      net: [],
      env: [],
      run: [],
      ffi: [],
      sys: [],
      enforce: "strict",
    });
    assert.deepEqual(
      resolvePermissions({}, CWD),
      resolvePermissions(undefined, CWD),
    );
  });

  test('resolvePermissions() "all" grants every kind', () => {
    const all = resolvePermissions("all", CWD);
    assert.equal(all.all, true);
    for (
      const kind of [
        "read",
        "write",
        "net",
        "env",
        "run",
        "ffi",
        "sys",
      ] as const
    ) {
      assert.equal(all[kind], true, kind);
    }
  });

  test("resolvePermissions() resolves relative paths against cwd and keeps absolute ones", () => {
    const resolved = resolvePermissions(
      {
        read: ["./data", "../shared/ref", "/etc/hosts", "data/sub/.."],
        write: ["out/"],
        ffi: ["./native/libfoo.so", "libc.so.6"],
      },
      CWD,
    );
    assert.deepEqual(resolved.read, [
      "/srv/app/data",
      "/srv/shared/ref",
      "/etc/hosts",
    ]);
    assert.deepEqual(resolved.write, ["/srv/app/out"]);
    assert.deepEqual(resolved.ffi, [
      "/srv/app/native/libfoo.so",
      "/srv/app/libc.so.6",
    ]);
  });

  test("resolvePermissions() accepts file: URLs as paths", () => {
    const resolved = resolvePermissions(
      { read: ["file:///var/data/", "file:///var/data"] },
      CWD,
    );
    assert.deepEqual(resolved.read, ["/var/data"]);
  });

  test("resolvePermissions() accepts URL objects wherever a path is accepted", () => {
    const resolved = resolvePermissions({
      read: [new URL("file:///srv/data/")],
      write: [new URL("file:///srv/out")],
      ffi: [new URL("file:///usr/lib/libx.so")],
      run: [new URL("file:///usr/bin/git")],
    }, CWD);
    assert.deepEqual(resolved.read, ["/srv/data"]);
    assert.deepEqual(resolved.write, ["/srv/out"]);
    assert.deepEqual(resolved.ffi, ["/usr/lib/libx.so"]);
    assert.deepEqual(resolved.run, ["/usr/bin/git"]);
    assert.throws(
      () => resolveUnchecked({ read: [new URL("https://example.com/")] }),
      (error: unknown) =>
        error instanceof TypeError &&
        error.message.includes('"permissions.read[0]"') &&
        error.message.includes("https://example.com/"),
    );
    assert.throws(
      () => resolveUnchecked({ env: [new URL("file:///x")] }),
      TypeError,
    );
  });

  test("resolvePermissions() deduplicates scopes after resolving", () => {
    const resolved = resolvePermissions(
      {
        read: ["./a", "/srv/app/a", "a/"],
        net: ["localhost:80", "localhost:80"],
        env: ["HOME", "HOME", "PATH"],
      },
      CWD,
    );
    assert.deepEqual(resolved.read, ["/srv/app/a"]);
    assert.deepEqual(resolved.net, ["localhost:80"]);
    assert.deepEqual(resolved.env, ["HOME", "PATH"]);
  });

  test("resolvePermissions() normalises booleans", () => {
    const resolved = resolvePermissions(
      { read: true, write: false, net: true, env: [], enforce: "best-effort" },
      CWD,
    );
    assert.equal(resolved.read, true);
    assert.deepEqual(resolved.write, []);
    assert.equal(resolved.net, true);
    assert.deepEqual(resolved.env, []);
    assert.equal(resolved.enforce, "best-effort");
  });

  test("resolvePermissions() keeps run names and resolves run paths", () => {
    const resolved = resolvePermissions(
      { run: ["git", "./bin/tool", "/usr/bin/env"] },
      CWD,
    );
    assert.deepEqual(resolved.run, [
      "git",
      "/srv/app/bin/tool",
      "/usr/bin/env",
    ]);
  });

  test("resolvePermissions() keeps net, env and sys scopes as given", () => {
    const resolved = resolvePermissions(
      {
        net: ["example.com", "127.0.0.1:8080", "[::1]:9000"],
        env: ["AWS_*", "HOME"],
        sys: ["hostname", "osRelease"],
      },
      CWD,
    );
    assert.deepEqual(resolved.net, [
      "example.com",
      "127.0.0.1:8080",
      "[::1]:9000",
    ]);
    assert.deepEqual(resolved.env, ["AWS_*", "HOME"]);
    assert.deepEqual(resolved.sys, ["hostname", "osRelease"]);
  });

  test("resolvePermissions() rejects a non-object with TypeError naming the option", () => {
    for (const input of [null, 42, ["./data"], () => {}]) {
      assert.throws(
        () => resolveUnchecked(input),
        (error: unknown) =>
          error instanceof TypeError &&
          error.message.includes('"permissions"'),
        String(input),
      );
    }
  });

  test("resolvePermissions() rejects an unknown string with RangeError quoting it", () => {
    assert.throws(
      () => resolveUnchecked("al"),
      (error: unknown) =>
        error instanceof RangeError && error.message.includes('"al"') &&
        error.message.includes('"all"'),
    );
  });

  test("resolvePermissions() rejects an unknown key with TypeError naming it", () => {
    assert.throws(
      () => resolveUnchecked({ reads: ["./data"] }),
      (error: unknown) =>
        error instanceof TypeError &&
        error.message.includes('"permissions.reads"'),
    );
  });

  test("resolvePermissions() rejects a field that is neither array nor boolean", () => {
    assert.throws(
      () => resolveUnchecked({ read: "./data" }),
      (error: unknown) =>
        error instanceof TypeError &&
        error.message.includes('"permissions.read"') &&
        error.message.includes('"./data"'),
    );
  });

  test("resolvePermissions() names the index and value of a bad entry", () => {
    assert.throws(
      () => resolveUnchecked({ read: ["./a", "./b", 7] }),
      (error: unknown) =>
        error instanceof TypeError &&
        error.message.includes('"permissions.read[2]"') &&
        error.message.includes("received 7"),
    );
    assert.throws(
      () => resolveUnchecked({ write: ["./a", ""] }),
      (error: unknown) =>
        error instanceof RangeError &&
        error.message.includes('"permissions.write[1]"') &&
        error.message.includes('""'),
    );
  });

  test("resolvePermissions() rejects scopes Deno's flags cannot express", () => {
    assert.throws(
      () => resolveUnchecked({ read: ["./a,b"] }),
      (error: unknown) =>
        error instanceof RangeError &&
        error.message.includes('"permissions.read[0]"') &&
        error.message.includes("comma"),
    );
    assert.throws(
      () => resolveUnchecked({ read: ["a\0b"] }),
      RangeError,
    );
  });

  test("resolvePermissions() rejects a URL as a net scope", () => {
    assert.throws(
      () => resolveUnchecked({ net: ["https://example.com"] }),
      (error: unknown) =>
        error instanceof RangeError &&
        error.message.includes('"permissions.net[0]"') &&
        error.message.includes('"https://example.com"'),
    );
  });

  test("resolvePermissions() rejects bad env and sys scopes", () => {
    assert.throws(() => resolveUnchecked({ env: ["A=1"] }), RangeError);
    assert.throws(() => resolveUnchecked({ env: ["A B"] }), RangeError);
    assert.throws(() => resolveUnchecked({ sys: ["host-name"] }), RangeError);
  });

  test("resolvePermissions() validates enforce", () => {
    assert.throws(
      () => resolveUnchecked({ enforce: "lenient" }),
      (error: unknown) =>
        error instanceof RangeError &&
        error.message.includes('"permissions.enforce"') &&
        error.message.includes('"lenient"'),
    );
    assert.throws(() => resolveUnchecked({ enforce: true }), TypeError);
  });

  test("resolvePermissions() uses the given option name in messages", () => {
    assert.throws(
      () => resolveUnchecked({ read: [1] }, "pool.permissions"),
      (error: unknown) =>
        error instanceof TypeError &&
        error.message.includes('"pool.permissions.read[0]"'),
    );
  });

  test("resolvePermissions() refuses a relative cwd", () => {
    assert.throws(
      () => resolvePermissions({ read: ["./a"] }, "relative/dir"),
      RangeError,
    );
  });

  test("resolvePermissions() copies its input", () => {
    const read = ["./a"];
    const resolved = resolvePermissions({ read }, CWD);
    read.push("./b");
    assert.deepEqual(resolved.read, ["/srv/app/a"]);
  });
});

describe("isGranted()", () => {
  test("isGranted() is true for true and non-empty lists only", () => {
    assert.equal(isGranted(true), true);
    assert.equal(isGranted(["x"]), true);
    assert.equal(isGranted([]), false);
  });
});

describe("denoPermissionFlags()", () => {
  test("denoPermissionFlags() with nothing granted is --no-prompt, and unknown variables read as undefined", () => {
    assert.deepEqual(
      denoPermissionFlags(resolvePermissions(undefined, CWD), []),
      ["--no-prompt", "--ignore-env"],
    );
  });

  test("denoPermissionFlags() lets the given variables be read without a grant, and only them", () => {
    assert.deepEqual(
      denoPermissionFlags(resolvePermissions(undefined, CWD), [], ["TOKEN"]),
      ["--no-prompt", "--allow-env=TOKEN", "--ignore-env"],
    );
    assert.deepEqual(
      denoPermissionFlags(
        resolvePermissions({ env: ["HOME", "TOKEN"] }, CWD),
        [],
        ["TOKEN", "MODE"],
      ),
      ["--no-prompt", "--allow-env=HOME,TOKEN,MODE", "--ignore-env"],
    );
    // Granted wholesale: every variable of its (cleared) environment.
    assert.deepEqual(
      denoPermissionFlags(resolvePermissions({ env: true }, CWD), [], ["A"]),
      ["--no-prompt", "--allow-env"],
    );
    assert.deepEqual(
      denoPermissionFlags(resolvePermissions("all", CWD), [], ["A"]),
      ["-A"],
    );
  });

  test("denoPermissionFlags() refuses a given variable name Deno's flags cannot express", () => {
    const resolved = resolvePermissions(undefined, CWD);
    for (const name of ["A,B", ""]) {
      assert.throws(
        () => denoPermissionFlags(resolved, [], [name]),
        (error: unknown) =>
          error instanceof RangeError && error.message.includes('"env"'),
      );
    }
  });

  test('denoPermissionFlags() "all" is -A', () => {
    assert.deepEqual(
      denoPermissionFlags(resolvePermissions("all", CWD), ["/x"]),
      ["-A"],
    );
  });

  test("denoPermissionFlags() gives one flag per granted kind, in a fixed order", () => {
    const flags = denoPermissionFlags(
      resolvePermissions(
        {
          sys: ["hostname"],
          ffi: true,
          run: ["git"],
          env: ["HOME", "PATH"],
          net: ["example.com:443"],
          write: ["./out"],
          read: ["./data", "./out"],
        },
        CWD,
      ),
      [],
    );
    assert.deepEqual(flags, [
      "--no-prompt",
      "--allow-read=/srv/app/data,/srv/app/out",
      "--allow-write=/srv/app/out",
      "--allow-net=example.com:443",
      "--allow-env=HOME,PATH",
      "--allow-run=git",
      "--allow-ffi",
      "--allow-sys=hostname",
      "--ignore-env",
    ]);
  });

  test("denoPermissionFlags() merges extra read paths, deduplicated", () => {
    const resolved = resolvePermissions({ read: ["./data"] }, CWD);
    assert.deepEqual(
      denoPermissionFlags(resolved, ["/srv/app/data", "/opt/airlock"]),
      [
        "--no-prompt",
        "--allow-read=/srv/app/data,/opt/airlock",
        "--ignore-env",
      ],
    );
    assert.deepEqual(
      denoPermissionFlags(resolvePermissions(undefined, CWD), ["/opt/airlock"]),
      ["--no-prompt", "--allow-read=/opt/airlock", "--ignore-env"],
    );
  });

  test("denoPermissionFlags() ignores extra read paths when read is granted wholesale", () => {
    assert.deepEqual(
      denoPermissionFlags(resolvePermissions({ read: true }, CWD), ["/x"]),
      ["--no-prompt", "--allow-read", "--ignore-env"],
    );
  });

  test("denoPermissionFlags() rejects relative or comma-holding extra read paths", () => {
    const resolved = resolvePermissions(undefined, CWD);
    assert.throws(
      () => denoPermissionFlags(resolved, ["relative"]),
      RangeError,
    );
    assert.throws(() => denoPermissionFlags(resolved, ["/a,b"]), RangeError);
  });
});
