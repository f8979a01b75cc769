// Errors that name the fix: a denied access says which grant of
// `permissions` it needs (Deno's NotCapable advice, "--allow-env", is wrong
// inside a worker; under the OS sandbox a read outside the grants is ENOENT
// and a write EROFS, with no word about permissions), a worker that fails
// to start shows its stack once, and a Bun syntax error names its file and
// line.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { RemoteError, session, WorkerStartError } from "../../mod.ts";
import {
  accessHint,
  grantInHint,
  type HintContext,
} from "../../src/parent/_hints.ts";
import {
  type ResolvedPermissions,
  resolvePermissions,
} from "../../src/runtime/permissions.ts";
import {
  findPython,
  PYTHON_ENTRY,
  pythonFixture,
} from "../conformance/_python.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { hasTool, needs, needsWorkers } from "../_helpers/tools.ts";
import { rejection } from "../_helpers/wait.ts";

checkNoLeaks();

const NOTHING: ResolvedPermissions = {
  all: false,
  read: ["/srv/data"],
  write: ["/srv/data/out"],
  net: [],
  env: [],
  run: [],
  ffi: [],
  sys: [],
  enforce: "strict",
};

function context(overrides: Partial<HintContext> = {}): HintContext {
  return {
    permissions: NOTHING,
    cwd: "/srv",
    sandboxed: true,
    exists: () => true,
    ...overrides,
  };
}

function notCapable(message: string): Error {
  const error = new Error(message);
  error.name = "NotCapable";
  return error;
}

function errno(
  code: string,
  fields: Record<string, unknown>,
  message = `${code}: failed`,
): Error {
  return Object.assign(new Error(message), { code, ...fields });
}

describe("error hints", () => {
  test("accessHint() turns each Deno NotCapable message into the permissions grant it needs", () => {
    const cases: [string, RegExp][] = [
      [
        'Requires env access to "X", run again with the --allow-env flag',
        /permissions\.env: \["X"\] instead of --allow-env/,
      ],
      [
        'Requires read access to "/etc/hostname", run again with the --allow-read flag',
        /permissions\.read: \["\/etc\/hostname"\]/,
      ],
      [
        'Requires write access to "/tmp/zz", run again with the --allow-write flag',
        /permissions\.write: \["\/tmp\/zz"\]/,
      ],
      [
        'Requires net access to "example.com:8080", run again with the --allow-net flag',
        /permissions\.net: \["example\.com:8080"\]/,
      ],
      [
        'Requires run access to "ls", run again with the --allow-run flag',
        /permissions\.run: \["ls"\]/,
      ],
      [
        'Requires ffi access to "/lib/x.so", run again with the --allow-ffi flag',
        /permissions\.ffi: \["\/lib\/x\.so"\]/,
      ],
      [
        'Requires sys access to "hostname", run again with the --allow-sys flag',
        /permissions\.sys: \["hostname"\]/,
      ],
      [
        "Requires env access, run again with the --allow-env flag",
        /permissions\.env: true/,
      ],
      [
        'Requires import access to "jsr.io:443", run again with the --allow-import flag',
        /permissions\.net: \["jsr\.io:443"\]/,
      ],
    ];
    for (const [message, hint] of cases) {
      assert.match(accessHint(notCapable(message), context()) ?? "", hint);
    }
    // Not sandboxed: NotCapable still comes from Deno's flags.
    assert.match(
      accessHint(notCapable(cases[0]![0]), context({ sandboxed: false })) ??
        "",
      /permissions\.env/,
    );
    assert.equal(
      accessHint(notCapable("something else"), context()),
      undefined,
    );
  });

  test("accessHint() names permissions.read or permissions.write for a sandboxed ENOENT, EROFS or EACCES outside the grants", () => {
    const read = accessHint(
      errno("ENOENT", { path: "/etc/hostname", syscall: "open" }),
      context(),
    );
    assert.match(read ?? "", /permissions: \{ read: \["\/etc\/hostname"\] \}/);
    assert.match(read ?? "", /exists for the parent/);
    // The path from the message when the error has no `path`.
    assert.match(
      accessHint(
        errno(
          "ENOENT",
          {},
          "No such file or directory (os error 2): readfile '/etc/x'",
        ),
        context({ exists: () => undefined }),
      ) ?? "",
      /read: \["\/etc\/x"\]/,
    );
    // Relative paths resolve against the worker's cwd.
    assert.match(
      accessHint(errno("EROFS", { path: "../etc/y" }), context()) ?? "",
      /write: \["\/etc\/y"\]/,
    );
    assert.match(
      accessHint(errno("EACCES", { path: "/srv/data/in.txt" }), context()) ??
        "",
      /permissions: \{ write: \["\/srv\/data\/in\.txt"\] \}/,
    );
    // Landlock alone refuses a read bubblewrap would hide: the read grant.
    assert.match(
      accessHint(errno("EACCES", { path: "/etc/hostname" }), context()) ?? "",
      /permissions: \{ read: \["\/etc\/hostname"\] \}.*permissions\.write/,
    );
    // Inside the grants, missing on the host, or not sandboxed: no hint.
    assert.equal(
      accessHint(errno("ENOENT", { path: "/srv/data/a" }), context()),
      undefined,
    );
    assert.equal(
      accessHint(
        errno("ENOENT", { path: "/nope" }),
        context({ exists: () => false }),
      ),
      undefined,
    );
    assert.equal(
      accessHint(
        errno("ENOENT", { path: "/etc/x" }),
        context({ sandboxed: false }),
      ),
      undefined,
    );
    assert.equal(
      accessHint(errno("EROFS", { path: "/srv/data/out/f" }), context()),
      undefined,
    );
  });

  test("accessHint() names permissions.net for a failed connection and permissions.run for a hidden program", () => {
    assert.match(
      accessHint(
        errno("ECONNREFUSED", {
          address: "127.0.0.1",
          port: 9,
          syscall: "connect",
        }),
        context(),
      ) ?? "",
      /no network access.*net: \["127\.0\.0\.1:9"\]/,
    );
    assert.match(
      accessHint(
        errno("EAI_AGAIN", { path: "https://example.com/x" }),
        context(),
      ) ??
        "",
      /net: \["example\.com:443"\]/,
    );
    assert.equal(
      accessHint(
        errno("ECONNREFUSED", { address: "127.0.0.1", port: 9 }),
        context({ permissions: { ...NOTHING, net: true } }),
      ),
      undefined,
    );
    assert.match(
      accessHint(
        errno("ENOENT", { path: "/bin/sh", syscall: "posix_spawn" }),
        context(),
      ) ?? "",
      /read: \["\/bin\/sh"\]/,
    );
    assert.match(
      accessHint(
        errno("ENOENT", { path: "python3", syscall: "spawn python3" }),
        context(),
      ) ??
        "",
      /run: \["python3"\]/,
    );
  });

  test("accessHint() names permissions.net for the bare EPERM of listing the network interfaces", () => {
    // detect-libc's process.report.getReport() under the sandbox (lmdb,
    // @libsql/client): no path, no code but the name.
    // As it crosses the wire: a plain object.
    const denied = {
      name: "PermissionDenied",
      message: "Operation not permitted (os error 1)",
      stack:
        "PermissionDenied: Operation not permitted (os error 1)\n    at Object.networkInterfaces (ext:deno_os/30_os.js:1:742)\n    at Object.getReport (ext:deno_node/internal/process/report.ts:1:1172)",
    };
    const hint = accessHint(denied, context()) ?? "";
    assert.match(hint, /permissions\.net: true/);
    assert.deepEqual(grantInHint(hint), { kind: "net", value: true });
    assert.equal(
      accessHint(denied, context({ sandboxed: false })),
      undefined,
    );
  });

  test("accessHint() names the package read (and sys uid) for bindings' missing module root", () => {
    // hnswlib-node's loader on Deno: fs.accessSync refused, swallowed.
    const lost = new Error(
      'Could not find module root given file: "/srv/node_modules/hnswlib-node/lib/index.js". Do you have a `package.json` file? ',
    );
    const hint = accessHint(lost, context()) ?? "";
    assert.deepEqual(grantInHint(hint), {
      kind: "read",
      value: "/srv/node_modules/hnswlib-node",
    });
    assert.match(hint, /sys: \["uid"\]/);
    const withRead = resolvePermissions(
      { read: ["./node_modules/hnswlib-node"] },
      "/srv",
    );
    const sysHint = accessHint(lost, context({ permissions: withRead })) ?? "";
    assert.deepEqual(grantInHint(sysHint), { kind: "sys", value: "uid" });
    const both = resolvePermissions(
      { read: ["./node_modules/hnswlib-node"], sys: ["uid"] },
      "/srv",
    );
    assert.equal(accessHint(lost, context({ permissions: both })), undefined);
    const uidOnly = resolvePermissions({ sys: ["uid"] }, "/srv");
    const readHint = accessHint(lost, context({ permissions: uidOnly })) ?? "";
    assert.equal(grantInHint(readHint)?.kind, "read");
    assert.doesNotMatch(readHint, /uid/);
  });

  test("grantInHint() reads back the grant every hint names", () => {
    const cases: [unknown, ReturnType<typeof grantInHint>][] = [
      [errno("ENOENT", { path: "/etc/hostname" }), {
        kind: "read",
        value: "/etc/hostname",
      }],
      [errno("EROFS", { path: "/srv/x" }), { kind: "write", value: "/srv/x" }],
      [errno("EACCES", { path: "/etc/hostname" }), {
        kind: "read",
        value: "/etc/hostname",
      }],
      [
        notCapable(
          'Requires sys access to "uid", run again with the --allow-sys flag',
        ),
        { kind: "sys", value: "uid" },
      ],
      [notCapable("Requires env access, run again with the --allow-env flag"), {
        kind: "env",
        value: true,
      }],
    ];
    for (const [error, grant] of cases) {
      assert.deepEqual(grantInHint(accessHint(error, context()) ?? ""), grant);
    }
    assert.equal(grantInHint("no grant here"), undefined);
  });

  test("accessHint() finds the denial in the cause chain and survives hostile values", () => {
    const wrapped = new Error("query failed", {
      cause: errno("EROFS", { path: "/var/lib/db" }),
    });
    assert.match(
      accessHint(wrapped, context()) ?? "",
      /write: \["\/var\/lib\/db"\]/,
    );
    const cyclic = new Error("loop");
    cyclic.cause = cyclic;
    assert.equal(accessHint(cyclic, context()), undefined);
    const hostile = new Proxy({}, {
      getOwnPropertyDescriptor() {
        throw new Error("trap");
      },
    });
    assert.equal(accessHint(hostile, context()), undefined);
  });

  test("RemoteError keeps the worker's message and shows the hint in hint and at the end of stack", () => {
    const error = new RemoteError({
      module: "db.ts",
      op: "open",
      pid: 1,
      remoteName: "Error",
      remoteMessage: "EROFS: read-only file system, open '/x'",
      remoteStack: "Error: EROFS\n    at open (db.ts:1:1)",
      properties: { code: "EROFS" },
      hint: "add it to permissions.write",
    });
    assert.equal(error.message, "EROFS: read-only file system, open '/x'");
    assert.equal(error.code, "EROFS");
    assert.equal(error.hint, "add it to permissions.write");
    assert.match(
      error.stack ?? "",
      /\n {4}hint: add it to permissions\.write$/,
    );
  });

  test(
    `session() on ${RUNTIME}: a read and a write outside the grants fail with the worker's error and a hint naming the grant`,
    needsWorkers(),
    async () => {
      using dir = scratchDir("hints");
      await using s = await session(fixture("permissions_worker.ts"), {
        ...captureLog(),
        permissions: { read: [dir.path], write: [dir.path] },
      });
      assert.equal(await s.call("write", [dir.join("ok.txt"), "x"]), "written");
      const read = await rejection(
        s.call("read", ["/etc/hostname"]),
        RemoteError,
      );
      const write = await rejection(
        s.call("write", ["/usr/airlock-hint", "x"]),
        RemoteError,
      );
      if (RUNTIME === "deno") {
        assert.equal(read.name, "NotCapable");
        assert.match(
          read.message,
          /^Requires read access to "\/etc\/hostname", run again with the --allow-read flag/,
        );
        assert.match(
          read.hint ?? "",
          /permissions\.read: \["\/etc\/hostname"\] instead of --allow-read/,
        );
        assert.equal(write.name, "NotCapable");
        assert.match(
          write.hint ?? "",
          /permissions\.write: \["\/usr\/airlock-hint"\]/,
        );
      } else {
        // bubblewrap hides what is not granted; Landlock alone refuses it.
        const hidden = hasTool("bwrap") ? "ENOENT" : "EACCES";
        assert.equal(read.code, hidden);
        assert.match(read.message, new RegExp(`^${hidden}`));
        assert.match(
          read.hint ?? "",
          /permissions: \{ read: \["\/etc\/hostname"\] \}/,
        );
        assert.ok(
          write.code === "EROFS" || write.code === "EACCES",
          String(write.code),
        );
        assert.match(write.hint ?? "", /permissions\.write/);
      }
      assert.match(read.stack ?? "", /hint: /);
    },
  );

  test(`session() on ${RUNTIME}: a worker that throws during import shows its stack once`, async () => {
    const log = captureLog();
    const error = await rejection(
      session(fixture("import_throws_worker.ts"), { ...log, maxRetries: 0 }),
      WorkerStartError,
    );
    assert.equal(error.failure, "import");
    const frames = error.message.split("import_throws_worker.ts:4:").length - 1;
    assert.equal(frames, 1, error.message);
    assert.deepEqual(
      log.lines.filter((line) => line.includes("import_throws_worker.ts:4:")),
      [],
      "the stack was printed live too",
    );
  });

  test(
    `session() on ${RUNTIME}: a module that fails a denied access at import, or in a setup call, names the grant in its start error`,
    needsWorkers(),
    async () => {
      const atImport = await rejection(
        session(fixture("import_denied_worker.ts"), {
          ...captureLog(),
          maxRetries: 0,
        }),
        WorkerStartError,
      );
      assert.equal(atImport.failure, "import");
      assert.match(
        atImport.message,
        /\(hint: .*permissions\.read.*"\/etc\/hostname"/,
      );
      const inSetup = await rejection(
        session(fixture("permissions_worker.ts"), {
          ...captureLog(),
          maxRetries: 0,
          setup: [["read", "/etc/hostname"]],
        }),
        WorkerStartError,
      );
      assert.equal(inSetup.failure, "setup");
      assert.match(inSetup.message, /\(hint: .*permissions\.read/);
      assert.ok(inSetup.cause instanceof RemoteError);
      assert.match(inSetup.cause.hint ?? "", /permissions\.read/);
    },
  );

  const python = findPython();
  test(
    "session() of a Python command worker that raises during import shows its traceback once",
    {
      skip: needs("python3").skip ?? python.skip,
    },
    async () => {
      const log = captureLog();
      const error = await rejection(
        session(pythonFixture("import_error_worker.py"), {
          ...log,
          command: [
            python.path ?? "python3",
            "-B",
            PYTHON_ENTRY,
            pythonFixture("import_error_worker.py"),
          ],
          maxRetries: 0,
        }),
        WorkerStartError,
      );
      assert.equal(error.failure, "import");
      const mentions = (text: string) =>
        text.split('import_error_worker.py", line').length - 1;
      assert.ok(
        mentions(error.remoteStack ?? "") >= 1,
        String(error.remoteStack),
      );
      assert.equal(mentions(error.stderrTail), 0, error.stderrTail);
      assert.deepEqual(
        log.lines.filter((line) => line.includes("Traceback")),
        [],
        "the traceback was printed live too",
      );
    },
  );

  for (const runtime of ["deno", "bun"] as const) {
    test(
      `session() on ${runtime}: a worker with a syntax error names its file and line`,
      needsWorkers(runtime),
      async () => {
        using dir = scratchDir("syntax");
        const path = dir.join("broken_worker.ts");
        writeFileSync(
          path,
          "export default {\n  a() { return 1; },\n  b() { let x = ;\n  },\n};\n",
        );
        const error = await rejection(
          session(path, { ...captureLog(), runtime, maxRetries: 0 }),
          WorkerStartError,
        );
        assert.equal(error.failure, "import");
        assert.match(error.message, /broken_worker\.ts:3:17/);
        assert.match(error.message, /let x = ;/);
      },
    );
  }
});
