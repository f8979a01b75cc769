import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  ACCESS_READ,
  ACCESS_READ_EXECUTE,
  ACCESS_READ_WRITE,
  LANDLOCK_ACCESS_FS,
  LANDLOCK_ACCESS_NET,
  LANDLOCK_SCOPE,
  landlockGaps,
  type LandlockRuleset,
  landlockRuleset,
  portOf,
} from "../../src/runtime/sandbox/landlock.ts";
import {
  type Permissions,
  resolvePermissions,
} from "../../src/runtime/permissions.ts";
import {
  LIBRARY_PATHS,
  NETWORK_PATHS,
  PROGRAM_PATHS,
} from "../../src/runtime/sandbox/bwrap.ts";

function build(permissions: Permissions | undefined, abi = 7): LandlockRuleset {
  return landlockRuleset({
    abi,
    permissions: resolvePermissions(permissions, "/app"),
    executables: ["/opt/deno/deno"],
    readOnly: ["/app/project"],
  });
}

/** The access given to a path by its rules (rules for the same path add up). */
function accessOf(ruleset: LandlockRuleset, path: string): number {
  return ruleset.paths.filter((rule) => rule.path === path)
    .reduce((access, rule) => access | rule.access, 0);
}

const TCP = LANDLOCK_ACCESS_NET.BIND_TCP | LANDLOCK_ACCESS_NET.CONNECT_TCP;

describe("landlockRuleset()", () => {
  test("landlockRuleset() lets a listOnly directory be listed, nothing more", () => {
    const ruleset = landlockRuleset({
      abi: 7,
      permissions: resolvePermissions(undefined, "/app"),
      executables: ["/opt/bun/bun"],
      readOnly: ["/airlock/worker.ts"],
      listOnly: ["/airlock"],
    });
    assert.equal(accessOf(ruleset, "/airlock"), LANDLOCK_ACCESS_FS.READ_DIR);
    assert.equal(accessOf(ruleset, "/airlock/worker.ts"), ACCESS_READ);
    assert.throws(
      () =>
        landlockRuleset({
          abi: 7,
          permissions: resolvePermissions(undefined, "/app"),
          executables: [],
          readOnly: [],
          listOnly: ["airlock"],
        }),
      RangeError,
    );
  });

  test("landlockRuleset() with nothing granted handles every access and opens only the system", () => {
    const ruleset = build(undefined);
    assert.equal(ruleset.handledFs, (1 << 16) - 1);
    assert.equal(ruleset.handledNet, TCP);
    assert.deepEqual(ruleset.ports, []);
    assert.equal(
      ruleset.scoped,
      LANDLOCK_SCOPE.SIGNAL | LANDLOCK_SCOPE.ABSTRACT_UNIX_SOCKET,
    );
    // The library directories are readable, not executable (issue 24,
    // item 4: a worker ran /usr/lib/git-core/git).
    for (const path of LIBRARY_PATHS) {
      assert.equal(accessOf(ruleset, path), ACCESS_READ, path);
    }
    assert.equal(accessOf(ruleset, "/opt/deno/deno"), ACCESS_READ_EXECUTE);
    assert.equal(accessOf(ruleset, "/app/project"), ACCESS_READ);
    assert.equal(accessOf(ruleset, "/proc/self"), ACCESS_READ);
    assert.equal(
      accessOf(ruleset, "/dev/null"),
      LANDLOCK_ACCESS_FS.READ_FILE | LANDLOCK_ACCESS_FS.WRITE_FILE,
    );
    // Nothing writable but the null devices, nothing at the root, no /tmp.
    const writable = ruleset.paths.filter((rule) =>
      (rule.access & LANDLOCK_ACCESS_FS.WRITE_FILE) !== 0
    ).map((rule) => rule.path);
    assert.deepEqual(writable.sort(), ["/dev/full", "/dev/null", "/dev/zero"]);
    assert.equal(accessOf(ruleset, "/"), 0);
    assert.equal(accessOf(ruleset, "/tmp"), 0);
    for (const path of [...NETWORK_PATHS, ...PROGRAM_PATHS]) {
      assert.equal(accessOf(ruleset, path), 0, path);
    }
    // No rule ever allows making device nodes.
    for (const rule of ruleset.paths) {
      assert.equal(rule.access & LANDLOCK_ACCESS_FS.MAKE_CHAR, 0);
      assert.equal(rule.access & LANDLOCK_ACCESS_FS.MAKE_BLOCK, 0);
    }
  });

  test("landlockRuleset() turns read and write scopes into read and read-write rules", () => {
    const ruleset = build({ read: ["./ref", "/srv/a"], write: ["./data"] });
    assert.equal(accessOf(ruleset, "/app/ref"), ACCESS_READ);
    assert.equal(accessOf(ruleset, "/srv/a"), ACCESS_READ);
    assert.equal(accessOf(ruleset, "/app/data"), ACCESS_READ_WRITE);
    assert.equal(ACCESS_READ_WRITE & LANDLOCK_ACCESS_FS.EXECUTE, 0);
    assert.equal(accessOf(ruleset, "/app"), 0);
  });

  test("landlockRuleset() with read or write true opens the root", () => {
    assert.equal(accessOf(build({ read: true }), "/"), ACCESS_READ);
    assert.equal(accessOf(build({ write: true }), "/"), ACCESS_READ_WRITE);
  });

  test("landlockRuleset() restricts TCP to the granted ports when every net scope names one", () => {
    const ruleset = build({ net: ["localhost:5432", "[::1]:8080", "db:5432"] });
    assert.equal(ruleset.handledNet, TCP);
    assert.deepEqual(ruleset.ports, [
      { port: 5432, access: TCP },
      { port: 8080, access: TCP },
    ]);
    for (const path of NETWORK_PATHS) {
      assert.equal(accessOf(ruleset, path), ACCESS_READ, path);
    }
    assert.equal(
      ruleset.scoped,
      LANDLOCK_SCOPE.SIGNAL | LANDLOCK_SCOPE.ABSTRACT_UNIX_SOCKET,
    );
  });

  test("landlockRuleset() leaves TCP open for a net scope without a port and for net: true", () => {
    const host = build({ net: ["localhost:5432", "example.com"] });
    assert.equal(host.handledNet, 0);
    assert.deepEqual(host.ports, []);
    const all = build({ net: true });
    assert.equal(all.handledNet, 0);
    // net: true also opens abstract unix sockets; signals stay scoped.
    assert.equal(all.scoped, LANDLOCK_SCOPE.SIGNAL);
  });

  test("landlockRuleset() makes run and ffi scopes executable", () => {
    // Names are resolved by the parent into `executables`: no directory.
    const names = build({ run: ["git"] });
    for (const path of PROGRAM_PATHS) {
      assert.equal(accessOf(names, path), 0, path);
    }
    const paths = build({ run: ["/opt/tool/bin/tool"], ffi: ["./lib.so"] });
    assert.equal(accessOf(paths, "/opt/tool/bin/tool"), ACCESS_READ_EXECUTE);
    assert.equal(accessOf(paths, "/app/lib.so"), ACCESS_READ_EXECUTE);
    for (const path of PROGRAM_PATHS) assert.equal(accessOf(paths, path), 0);
    const all = build({ run: true });
    assert.equal(accessOf(all, "/usr"), ACCESS_READ_EXECUTE);
  });

  test("landlockRuleset() opens grants with no link followed, at the path the parent resolved", () => {
    const ruleset = landlockRuleset({
      abi: 7,
      permissions: resolvePermissions(
        { read: ["/srv/link", "/srv/pub"], write: ["/srv/out"] },
        "/app",
      ),
      executables: ["/opt/deno/deno"],
      readOnly: ["/app/project"],
      grants: {
        at: new Map([["/srv/link", "/data/real"]]),
        required: new Set(["/srv/pub"]),
      },
    });
    const rule = (path: string) => ruleset.paths.find((r) => r.path === path);
    assert.deepEqual(rule("/data/real"), {
      path: "/data/real",
      access: ACCESS_READ,
      exact: true,
    });
    assert.equal(rule("/srv/link"), undefined);
    assert.equal(rule("/srv/pub")?.required, true);
    assert.equal(rule("/srv/out")?.exact, true);
    // The system's own paths may be links (/lib -> usr/lib): followed.
    assert.equal(rule("/lib")?.exact, undefined);
  });

  test("landlockRuleset() handles only what the ABI knows", () => {
    const v1 = build({ write: ["/data"], net: ["h:1"] }, 1);
    assert.equal(v1.handledFs, (1 << 13) - 1);
    assert.equal(v1.handledNet, 0);
    assert.equal(v1.scoped, 0);
    assert.equal(accessOf(v1, "/data") & ~v1.handledFs, 0);
    const v3 = build(undefined, 3);
    assert.equal(
      v3.handledFs & LANDLOCK_ACCESS_FS.TRUNCATE,
      LANDLOCK_ACCESS_FS.TRUNCATE,
    );
    assert.equal(v3.handledFs & LANDLOCK_ACCESS_FS.IOCTL_DEV, 0);
    assert.equal(build(undefined, 4).handledNet, TCP);
    assert.equal(build(undefined, 5).scoped, 0);
    assert.equal(
      build(undefined, 6).scoped & LANDLOCK_SCOPE.SIGNAL,
      LANDLOCK_SCOPE.SIGNAL,
    );
  });

  test("landlockRuleset() refuses a relative path", () => {
    assert.throws(
      () =>
        landlockRuleset({
          abi: 7,
          permissions: resolvePermissions(undefined, "/"),
          executables: ["deno"],
          readOnly: [],
        }),
      RangeError,
    );
  });
});

describe("landlockGaps()", () => {
  test("landlockGaps() is empty from ABI 6 on", () => {
    const grants = resolvePermissions({ net: ["h:1"], write: ["/d"] }, "/");
    assert.deepEqual(landlockGaps(grants, 6), []);
    assert.deepEqual(landlockGaps(grants, 7), []);
  });

  test("landlockGaps() names signal scoping, TCP ports and truncate when the ABI lacks them", () => {
    const nothing = resolvePermissions(undefined, "/");
    assert.deepEqual(landlockGaps(nothing, 5).map((gap) => gap.abi), [6]);
    assert.deepEqual(landlockGaps(nothing, 3).map((gap) => gap.abi), [6]);
    assert.deepEqual(landlockGaps(nothing, 2).map((gap) => gap.abi), [3, 6]);
    const ports = resolvePermissions({ net: ["h:1"] }, "/");
    assert.deepEqual(landlockGaps(ports, 3).map((gap) => gap.abi), [4, 6]);
    const all = resolvePermissions({ net: true }, "/");
    assert.deepEqual(landlockGaps(all, 3).map((gap) => gap.abi), [6]);
    assert.deepEqual(landlockGaps(nothing, 0).map((gap) => gap.abi), [1]);
  });
});

describe("portOf()", () => {
  test("portOf() reads the port of host:port scopes only", () => {
    assert.equal(portOf("localhost:5432"), 5432);
    assert.equal(portOf("1.2.3.4:80"), 80);
    assert.equal(portOf("[::1]:8080"), 8080);
    assert.equal(portOf("::1"), undefined);
    assert.equal(portOf("example.com"), undefined);
    assert.equal(portOf("h:99999"), undefined);
  });
});
