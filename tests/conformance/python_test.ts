// The conformance suite against the Python worker package
// (workers/python/airlock_worker/, run through its launcher
// workers/python/airlock_worker.py), then what is Python's own: sqlite3,
// the value mapping, async handlers and start failures.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import process from "node:process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { oneShot, RemoteError, session, WorkerStartError } from "../../mod.ts";
import { scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs, needsSandbox } from "../_helpers/tools.ts";
import { rejection, until } from "../_helpers/wait.ts";
import { findPython, PYTHON_ENTRY, pythonFixture } from "./_python.ts";
import { conformance } from "./conformance.ts";

checkNoLeaks();

const python = findPython();

conformance({
  name: `python ${python.version ?? ""}`.trim(),
  command: [
    python.path ?? "python3",
    "-B",
    PYTHON_ENTRY,
    pythonFixture("conformance_worker.py"),
  ],
  // The protocol suite (whoami compares pids, which a pid namespace makes
  // all alike); the confinement of Python workers is tested below.
  permissions: "all",
  // The Python worker speaks message version 4 (limit, ping, dropped).
  messageVersion: 4,
  skip: needs("python3").skip ?? python.skip,
});

function atLeast(major: number, minor: number): boolean {
  const [a = 0, b = 0] = (python.version ?? "0.0").split(".").map(Number);
  return a > major || (a === major && b >= minor);
}

const skip = needs("python3").skip ?? python.skip;
const interpreter = python.path ?? "python3";
const quiet = { onStderr: () => {} };

function command(fixture: string): string[] {
  return [interpreter, "-B", PYTHON_ENTRY, pythonFixture(fixture)];
}

/** Registers a Python-only test, skipped with the reason when there is no Python. */
function pyTest(name: string, fn: () => Promise<void>): void {
  if (skip === undefined) test(name, fn);
  else test(name, { skip }, () => {});
}

interface SqliteOps {
  seed(path: string, names: string[]): number;
  names(path: string): string[];
  inode(path: string): number;
  query(path: string, sql: string): unknown[];
}

describe("python worker: sqlite3 state on disk", () => {
  pyTest(
    "oneShot() sees the data dir as it is now after a wipe; a session sees it after restart()",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "airlock-py-sqlite-"));
      const db = join(dir, "app.db");
      const wipe = (): void => {
        rmSync(dir, { recursive: true, force: true });
        mkdirSync(dir);
      };
      const options = {
        ...quiet,
        command: command("sqlite_worker.py"),
        permissions: { read: [dir], write: [dir] },
      };
      try {
        const fresh = oneShot<{ handlers: SqliteOps }>(db, options);
        await fresh.seed(db, ["a", "b", "c"]);
        assert.deepEqual(await fresh.names(db), ["a", "b", "c"]);

        await using s = await session<{ handlers: SqliteOps }>(db, options);
        assert.deepEqual(await s.names(db), ["a", "b", "c"]);

        wipe();
        await fresh.seed(db, ["new"]);
        assert.deepEqual(await fresh.names(db), ["new"], "oneShot: new state");
        assert.deepEqual(
          await s.names(db),
          ["a", "b", "c"],
          "the session's open connection still reads the wiped file",
        );
        const pid = s.pid;
        await s.restart();
        assert.notEqual(s.pid, pid);
        assert.deepEqual(await s.names(db), ["new"], "restart(): new state");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  pyTest(
    "a sqlite3 error crosses with its class name and sqlite attributes",
    async () => {
      const dir = mkdtempSync(join(tmpdir(), "airlock-py-sqlite-"));
      const db = join(dir, "app.db");
      try {
        await using s = await session<{ handlers: SqliteOps }>(db, {
          ...quiet,
          command: command("sqlite_worker.py"),
          permissions: { read: [dir], write: [dir] },
        });
        await s.seed(db, ["x"]);
        const failure = await rejection(
          s.query(db, "select * from missing"),
          RemoteError,
        );
        assert.equal(failure.name, "OperationalError");
        assert.match(failure.message, /no such table: missing/);
        assert.match(failure.remoteStack ?? "", /sqlite_worker\.py/);
        if (atLeast(3, 11)) {
          assert.equal(failure.properties.sqlite_errorname, "SQLITE_ERROR");
        }
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});

interface TypesOps {
  describe(value: unknown): unknown;
  pythonValues(): Record<string, unknown>;
  unsendable(kind: string): unknown;
  circular(): unknown;
  osError(path: string): string;
  raiseWithAttributes(): never;
  rawWrites(text: string): string;
  asyncDelay(ms: number, token: string): string;
  asyncCancelled(): string[];
  contextInfo(): { id: number; op: string; same: boolean; cancelled: boolean };
  echoError(error: Error): Record<string, unknown>;
  abort(): never;
}

type Types = { handlers: TypesOps };

function openTypes(log = captureLog()) {
  return session<Types>(pythonFixture("types_worker.py"), {
    onStderr: log.onStderr,
    command: command("types_worker.py"),
    // raw_writes runs /bin/echo.
    permissions: { run: ["/bin/echo"] },
  });
}

describe("python worker: the value mapping", () => {
  pyTest("values arrive as the Python types docs/python.md lists", async () => {
    await using s = await openTypes();
    const described = await s.describe({
      number: 1,
      float: 1.5,
      bigint: 5n,
      string: "s",
      bool: true,
      null: null,
      undefined: undefined,
      array: [1],
      object: { a: 1 },
      map: new Map([[1, 2]]),
      set: new Set([1]),
      date: new Date(0),
      regexp: /a/g,
      url: new URL("https://example.com/"),
      error: new Error("e"),
      bytes: new Uint8Array([1]),
      buffer: new ArrayBuffer(2),
      view: new DataView(new ArrayBuffer(2)),
      float64: new Float64Array([1]),
      int32: new Int32Array([1]),
      uint8Clamped: new Uint8ClampedArray([1]),
      big64: new BigInt64Array([1n]),
      large: new Uint8Array(100_000),
    });
    assert.deepEqual(described, {
      number: "int",
      float: "float",
      bigint: "int",
      string: "str",
      bool: "bool",
      null: "NoneType",
      undefined: "NoneType",
      array: ["int"],
      object: { a: "int" },
      map: { 1: "int" },
      set: "set",
      date: "datetime:UTC",
      regexp: "RegExp",
      url: "str",
      error: "WireError",
      bytes: "bytes",
      buffer: "bytes",
      view: "bytes",
      float64: "memoryview:d",
      int32: "memoryview:i",
      uint8Clamped: "memoryview:B",
      big64: "memoryview:q",
      large: "bytes",
    });
  });

  pyTest(
    "Python values arrive as the TypeScript values docs/python.md lists",
    async () => {
      await using s = await openTypes();
      const values = await s.pythonValues();
      const when = new Date(Date.UTC(2020, 0, 2, 3, 4, 5, 678));
      assert.deepEqual(values.tuple, [1, "two"]);
      assert.deepEqual(values.set, new Set([3]));
      assert.deepEqual(values.frozenset, new Set(["f"]));
      assert.deepEqual(values.intKeys, new Map([[1, "one"], [2, "two"]]));
      assert.deepEqual(values.naive, when, "a naive datetime is taken as UTC");
      assert.deepEqual(values.aware, when);
      assert.deepEqual(values.bytes, new Uint8Array([97, 98]));
      assert.deepEqual(values.bytearray, new Uint8Array([99, 100]));
      assert.deepEqual(values.doubles, new Float64Array([1.5, -2]));
      assert.deepEqual(values.ints, new Int32Array([-1, 7]));
      assert.equal(values.big, 2n ** 70n);
      assert.equal(values.beyondSafe, 2n ** 60n);
      assert.equal(values.float, 2);
      assert.deepEqual(values.pattern, /a+b/i);
      assert.deepEqual(values.regexp, /x/g);
      assert.equal(values.none, null);
      assert.ok(values.error instanceof Error);
      assert.equal((values.error as Error).name, "ValueError");
      assert.equal((values.error as Error).message, "bad value");
      assert.equal(values.bool, true);
      assert.equal(values.surrogate, "a\ufffdb");
    },
  );

  pyTest(
    "an error argument arrives as a WireError with its fields and cause",
    async () => {
      await using s = await openTypes();
      const sent = Object.assign(
        new RangeError("out", { cause: new TypeError("inner") }),
        { code: "E_OUT" },
      );
      assert.deepEqual(await s.echoError(sent), {
        isWireError: true,
        name: "RangeError",
        code: "E_OUT",
        cause: "WireError",
      });
    },
  );

  pyTest(
    "a result that cannot cross fails with a TypeError naming where it sits",
    async () => {
      await using s = await openTypes();
      const cases: [string, RegExp][] = [
        ["decimal", /value\.rows\[1\]\.value: a Decimal cannot cross/],
        ["date", /a date \(send a datetime instead\)/],
        ["object", /an object cannot cross/],
        ["dataclass", /dataclasses\.asdict/],
        ["function", /a function cannot cross/],
        ["complex", /a complex cannot cross/],
      ];
      for (const [kind, pattern] of cases) {
        const failure = await rejection(s.unsendable(kind), RemoteError);
        assert.equal(failure.name, "TypeError");
        assert.match(failure.message, pattern);
      }
      const loop = await rejection(s.circular(), RemoteError);
      assert.match(loop.message, /value\[1\]: a circular reference/);
    },
  );

  pyTest(
    "an argument Python cannot hold fails that call with a TypeError and the worker stays",
    async () => {
      await using s = await openTypes();
      const failure = await rejection(
        s.describe(new Map<unknown, unknown>([[[1, 2], "list key"]])),
        RemoteError,
      );
      assert.equal(failure.name, "TypeError");
      assert.match(failure.message, /args\[0\]\.keys\(\)\[0\]: a Map key/);
      const farDate = await rejection(
        s.describe(new Date(8.64e15)),
        RemoteError,
      );
      assert.match(farDate.message, /outside the years 1 to 9999/);
      assert.equal(await s.describe(1), "int");
    },
  );
});

describe("python worker: errors, output, async handlers and the call context", () => {
  pyTest(
    "an OSError keeps errno, strerror and filename; own attributes cross, unsendable ones as text",
    async () => {
      await using s = await openTypes();
      const missing = join(tmpdir(), "airlock-no-such-file");
      const failure = await rejection(s.osError(missing), RemoteError);
      assert.equal(failure.name, "FileNotFoundError");
      assert.equal(failure.properties.errno, 2);
      assert.equal(failure.properties.filename, missing);
      assert.equal(failure.properties.strerror, "No such file or directory");
      const other = await rejection(s.raiseWithAttributes(), RemoteError);
      assert.equal(other.name, "LookupError");
      assert.equal(other.properties.table, "t1");
      assert.deepEqual(other.properties.rows, [1, 2]);
      assert.match(String(other.properties.handle), /^\[unserializable /);
    },
  );

  pyTest(
    "writes to fd 1 from C code, subprocesses and sys.stdout all reach stderr",
    async () => {
      const log = captureLog();
      await using s = await openTypes(log);
      assert.equal(await s.rawWrites("raw"), "written");
      for (const source of ["fd 1", "a subprocess", "sys.stdout"]) {
        await until(
          () => log.lines.includes(`raw from ${source}`),
          10_000,
          `the line from ${source}`,
        );
      }
    },
  );

  pyTest(
    "an async handler runs on the asyncio loop and a cancel cancels its task",
    async () => {
      const log = captureLog();
      await using s = await openTypes(log);
      assert.equal(await s.asyncDelay(10, "done"), "done");
      const controller = new AbortController();
      const pending = s.call("asyncDelay", [60_000, "stopped"], {
        signal: controller.signal,
      });
      await until(
        () => log.lines.includes("async waiting stopped"),
        10_000,
        "the async handler to run",
      );
      const reason = new Error("stop");
      controller.abort(reason);
      assert.equal(await rejection(pending, Error), reason);
      await until(
        async () => (await s.asyncCancelled()).includes("stopped"),
        10_000,
        "the task to be cancelled",
      );
    },
  );

  pyTest(
    "a handler with a keyword-only context gets the call's id and op, also from current_call()",
    async () => {
      await using s = await openTypes();
      const info = await s.contextInfo();
      assert.equal(info.op, "contextInfo");
      assert.ok(info.id >= 1);
      assert.equal(info.same, true);
      assert.equal(info.cancelled, false);
      const aborted = await rejection(s.abort(), RemoteError);
      assert.equal(aborted.name, "AbortError");
    },
  );
});

describe("python worker: start failures", () => {
  pyTest(
    "a module that raises at import fails the start with its traceback",
    async () => {
      const failure = await rejection(
        session(pythonFixture("import_error_worker.py"), {
          ...quiet,
          command: command("import_error_worker.py"),
        }),
        WorkerStartError,
      );
      assert.equal(failure.failure, "import");
      assert.equal(failure.remoteMessage, "broken at import");
      assert.match(failure.remoteStack ?? "", /import_error_worker\.py/);
      assert.match(failure.stderrTail, /about to fail/);
    },
  );

  pyTest(
    "a module without a Worker fails the start as a definition error",
    async () => {
      const failure = await rejection(
        session(pythonFixture("no_definition_worker.py"), {
          ...quiet,
          command: command("no_definition_worker.py"),
        }),
        WorkerStartError,
      );
      assert.equal(failure.failure, "definition");
      assert.match(failure.message, /must define one Worker/);
    },
  );

  pyTest("a reserved handler name fails the start, naming it", async () => {
    const failure = await rejection(
      session(pythonFixture("reserved_name_worker.py"), {
        ...quiet,
        command: command("reserved_name_worker.py"),
      }),
      WorkerStartError,
    );
    assert.equal(failure.failure, "import");
    assert.match(failure.message, /"then" is reserved/);
  });
});

interface ConfineOps {
  read(path: string): string;
  write(path: string): string;
  unixConnect(path: string): string;
  tcpConnect(port: number): string;
  signal(pid: number, signal: number): string;
}

describe("python worker: confined like a module worker", needsSandbox(), () => {
  // Runs under bubblewrap and Landlock, and (second CI pass) Landlock alone.
  pyTest(
    "a Python worker reads and writes its grant and nothing else, and reaches no socket or process",
    async () => {
      using dir = scratchDir("py-confine");
      mkdirSync(dir.join("granted"));
      mkdirSync(dir.join("outside"));
      writeFileSync(dir.join("granted", "in.txt"), "inside");
      writeFileSync(dir.join("outside", "secret.txt"), "secret");
      const server = createServer((socket) => socket.destroy());
      const socketPath = dir.join("granted", "host.sock");
      await new Promise<void>((resolve) => server.listen(socketPath, resolve));
      try {
        await using s = await session<{ handlers: ConfineOps }>(
          pythonFixture("confine_worker.py"),
          {
            ...quiet,
            command: command("confine_worker.py"),
            permissions: {
              read: [dir.join("granted")],
              write: [dir.join("granted")],
            },
          },
        );
        assert.equal(await s.read(dir.join("granted", "in.txt")), "ok");
        assert.equal(await s.write(dir.join("granted", "new.txt")), "ok");
        assert.notEqual(await s.read(dir.join("outside", "secret.txt")), "ok");
        assert.notEqual(await s.write(dir.join("outside", "new.txt")), "ok");
        assert.notEqual(await s.read("/etc/shadow"), "ok");
        assert.notEqual(await s.unixConnect(socketPath), "ok");
        assert.notEqual(await s.signal(process.pid, 0), "ok");
      } finally {
        await new Promise((resolve) => server.close(resolve));
      }
    },
  );
});
