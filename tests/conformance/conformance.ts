/**
 * The conformance suite of the wire protocol (docs/PROTOCOL.md): the same
 * cases, run against any worker implementation, in any language, that
 * serves the conformance ops below. A test file calls
 * {@linkcode conformance} once per implementation; this file registers no
 * test by itself and is named so that no runner picks it up.
 *
 * The cases drive the worker two ways: through airlock's own `session`,
 * `oneShot` and `pool` with the `command` option (what users do), and
 * through raw frames on a spawned process (what the spec says a worker
 * does: the hello, stray input, shutdown, end-of-file).
 *
 * To check a new implementation, write a worker serving these ops with
 * exactly this behaviour, then a test file like `python_test.ts`:
 *
 * | op | behaviour |
 * | --- | --- |
 * | `echo(value)` | returns `value` |
 * | `add(a, b)` | returns `a + b` |
 * | `whoami()` | returns an identity of the worker process, unique among live workers: its pid (inside a pid namespace, where every worker's pid is the same, a unique id) |
 * | `delay(ms, value)` | returns `value` after `ms`; when cancelled, stops at once and fails with an error named `AbortError` |
 * | `hang()` | never returns, ignores cancellation |
 * | `rendezvous(key, n, timeoutMs)` | returns the count once `n` calls with this `key` run at the same time; fails after `timeoutMs` |
 * | `waitForCancel(token)` | writes `waiting <token>` to stderr, waits (up to 60 s) for the call's cancel, then records `token` and fails with `AbortError` |
 * | `cancelled()` | returns the tokens recorded by `waitForCancel`, in order |
 * | `crash()` | kills its own process with SIGKILL |
 * | `exitWith(code)` | exits the process with `code` |
 * | `throwCustom()` | throws an error named `CustomError`, message `"custom failure"`, own properties `code: "E_CUSTOM"` and `detail: { table: "t1" }`, cause a `TypeError` with message `"root cause"` |
 * | `returnUnsendable()` | returns `{ ok: true, fn: <a function> }` (a value that cannot cross) |
 * | `print(text)` | prints `text` with the language's ordinary print to stdout; returns `"printed"` |
 * | `stderr(text)` | writes `text` to stderr; returns `"written"` |
 * | `bytes(size)` | returns `size` bytes, byte `i` being `(i * 7) & 0xff` |
 * | `increment()` | adds one to a process-wide counter starting at 0 and returns it |
 * | `env(name)` | returns the environment variable, or `null` when unset |
 * | `cwd()` | returns the working directory |
 * | `count(n)` | streams the integers `0 .. n-1` |
 * | `countSync(n)` | the same, from the language's other kind of generator (TypeScript: `function*`; Python: `async def` with `yield`) |
 * | `endless(token)` | streams `0, 1, 2, …` without end; counts the values it produced under `token`, and marks `token` finished in its `finally` |
 * | `streamState(token)` | returns `{ produced, finished }` for `endless(token)`, or `null` |
 * | `failAfter(n)` | streams `0 .. n-1`, then throws an error named `CustomError` with message `"stream failure"` |
 * | `report(steps)` | reports progress `1 .. steps` as fast as it can, then returns `"reported"` |
 *
 * The worker declares `echo` and `add` idempotent and runs at least 4 calls
 * at once.
 *
 * @module
 */

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import {
  oneShot,
  pool,
  RemoteError,
  type Session,
  session,
  SessionClosedError,
  type SessionOptions,
  WorkerCrashedError,
  WorkerTimeoutError,
} from "../../mod.ts";
import type { PermissionsOption } from "../../mod.ts";
import type { LogSource } from "../../types.ts";
import { FrameReader } from "../../src/protocol/frame_reader.ts";
import {
  decodeMessage,
  type Message,
  MESSAGE_VERSION,
} from "../../src/protocol/messages.ts";
import { encodeMessage } from "../../src/protocol/encode_message.ts";
import { isAlive } from "../_helpers/processes.ts";
import { skipUnless } from "../_helpers/tools.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

/** The ops of a conformance worker (see the module documentation). */
export interface ConformanceOps {
  /** Returns `value`. */
  echo(value: unknown): unknown;
  /** Returns `a + b`. */
  add(a: number, b: number): number;
  /** Returns the worker's pid. */
  whoami(): number;
  /** Returns `value` after `ms`; fails with `AbortError` when cancelled. */
  delay(ms: number, value: unknown): unknown;
  /** Never returns. */
  hang(): never;
  /** Returns once `n` calls with `key` run at once. */
  rendezvous(key: string, n: number, timeoutMs: number): number;
  /** Waits for its cancel, records `token`. */
  waitForCancel(token: string): never;
  /** The tokens `waitForCancel` recorded. */
  cancelled(): string[];
  /** Kills its own process with SIGKILL. */
  crash(): never;
  /** Exits with `code`. */
  exitWith(code: number): never;
  /** Throws a `CustomError`. */
  throwCustom(): never;
  /** Returns a value that cannot cross. */
  returnUnsendable(): unknown;
  /** Prints to stdout. */
  print(text: string): string;
  /** Writes to stderr. */
  stderr(text: string): string;
  /** Returns `size` patterned bytes. */
  bytes(size: number): Uint8Array;
  /** Counts calls in this process. */
  increment(): number;
  /** Reads an environment variable. */
  env(name: string): string | null;
  /** Returns the working directory. */
  cwd(): string;
  /** Streams 0 .. n-1. */
  count(n: number): AsyncGenerator<number>;
  /** Streams 0 .. n-1, from the other kind of generator. */
  countSync(n: number): AsyncGenerator<number>;
  /** Streams 0, 1, 2 … forever. */
  endless(token: string): AsyncGenerator<number>;
  /** What `endless(token)` produced and whether its finally ran. */
  streamState(token: string): { produced: number; finished: boolean } | null;
  /** Streams 0 .. n-1, then throws. */
  failAfter(n: number): AsyncGenerator<number>;
  /** Reports progress 1 .. steps, returns "reported". */
  report(steps: number): string;
}

/** The conformance ops as a worker definition type, for the typed proxy. */
export type ConformanceWorker = { handlers: ConformanceOps };

/** An implementation to check. */
export interface ConformanceTarget {
  /** Its name in test titles, e.g. `"python"`. */
  name: string;
  /** The argv that starts a worker serving the conformance ops. */
  command: readonly string[];
  /** Variables the implementation itself needs (e.g. `DENO_DIR`). */
  env?: Readonly<Record<string, string>>;
  /** Why it cannot run here: the cases are then registered as skipped. */
  skip?: string | undefined;
  /**
   * The workers' permissions (default: airlock's, nothing granted). The
   * protocol suite may grant everything: confinement has its own tests.
   */
  permissions?: PermissionsOption;
  /**
   * The message version its hello names (default: the one airlock's own
   * worker speaks, `MESSAGE_VERSION`).
   */
  messageVersion?: number;
}

/** Every op a conformance worker serves. */
export const CONFORMANCE_OPS: readonly string[] = [
  "echo",
  "add",
  "whoami",
  "delay",
  "hang",
  "rendezvous",
  "waitForCancel",
  "cancelled",
  "crash",
  "exitWith",
  "throwCustom",
  "returnUnsendable",
  "print",
  "stderr",
  "bytes",
  "increment",
  "env",
  "cwd",
  "count",
  "countSync",
  "endless",
  "streamState",
  "failAfter",
  "report",
];

const Float16 = (globalThis as {
  Float16Array?: new (values: number[]) => ArrayBufferView;
}).Float16Array;

function patterned(size: number): Uint8Array {
  const data = new Uint8Array(size);
  for (let i = 0; i < size; i++) data[i] = (i * 7) & 0xff;
  return data;
}

/** An error as a decoder rebuilds it: name not enumerable, cause in options. */
function error(
  name: string,
  message: string,
  fields: Record<string, unknown> = {},
  cause?: Error,
): Error {
  const made = new Error(message, cause ? { cause } : undefined);
  Object.defineProperty(made, "name", {
    value: name,
    writable: true,
    enumerable: false,
    configurable: true,
  });
  return Object.assign(made, fields);
}

/** Values every implementation must return from `echo` exactly as sent. */
function exactValues(): [string, unknown][] {
  const largeFloats = new Float64Array(10_000);
  for (let i = 0; i < largeFloats.length; i++) largeFloats[i] = i / 3;
  return [
    ["integers at every CBOR width", [
      0,
      1,
      -1,
      23,
      24,
      -24,
      -25,
      255,
      256,
      65_535,
      65_536,
      2 ** 32 - 1,
      2 ** 32,
      -(2 ** 32),
      Number.MAX_SAFE_INTEGER,
      Number.MIN_SAFE_INTEGER,
    ]],
    ["floats, NaN and infinities", [
      0.5,
      -1.25,
      1e300,
      5e-324,
      Number.NaN,
      Infinity,
      -Infinity,
    ]],
    ["negative zero", -0],
    ["integers beyond 2^53, as bigint", [
      2n ** 53n,
      -(2n ** 53n) - 1n,
      2n ** 64n - 1n,
      -(2n ** 64n),
      2n ** 70n,
      -(2n ** 100n),
    ]],
    ["strings", ["", "a", "héllo", "日本語", "emoji 🎉", "x".repeat(70_000)]],
    ["booleans and null", [true, false, null]],
    ["nested arrays", [[], [1, [2, [3, [4, []]]]], [{ a: 1 }, [null]]]],
    ["plain objects", {
      a: 1,
      "key with space": 2,
      "": "empty key",
      nested: { deep: { deeper: [1, 2, { x: "y" }] } },
    }],
    [
      "a Map with non-text keys",
      new Map<unknown, unknown>([[1, "one"], [
        2,
        [true],
      ]]),
    ],
    ["a Set", new Set<unknown>([1, "two", null])],
    ["dates", [
      new Date(1_700_000_000_123),
      new Date(0),
      new Date(-2_208_988_800_001),
    ]],
    ["a RegExp with and without flags", [/x+y/gi, /^a.c$/]],
    ["a small Uint8Array", new Uint8Array([0, 1, 127, 128, 255])],
    ["a Uint8Array of 64 KiB and more (an attachment)", patterned(200_000)],
    ["typed arrays", [
      new Float64Array([1.5, -2, Number.NaN]),
      new Float32Array([0.5, -3]),
      new Int32Array([-1, 2 ** 31 - 1]),
      new Uint32Array([2 ** 32 - 1]),
      new Int16Array([-32_768]),
      new Uint16Array([65_535]),
      new Int8Array([-128, 127]),
      new BigInt64Array([-5n, 2n ** 63n - 1n]),
      new BigUint64Array([2n ** 64n - 1n]),
    ]],
    ["a Float64Array of 64 KiB and more (an attachment)", largeFloats],
    [
      "an error with properties and a cause",
      error("CustomError", "boom", { code: "E_BOOM" }, new TypeError("inner")),
    ],
  ];
}

/**
 * Values a language without the exact type may return in its nearest form:
 * `[label, sent, normalized]`. Either the sent value or the normalized one
 * passes (an array hole may also come back as `undefined`).
 */
function normalizedValues(): [string, unknown, unknown][] {
  const cases: [string, unknown, unknown][] = [
    ["undefined as null", [undefined], [null]],
    ["an array hole as undefined or null", [1, , 3], [1, null, 3]],
    ["a bigint in the safe range as a number", [5n, -7n], [5, -7]],
    [
      "a Map with text keys as a plain object",
      new Map([["a", 1], ["b", 2]]),
      { a: 1, b: 2 },
    ],
    [
      "a URL as its href",
      new URL("https://example.com/a?b=c"),
      "https://example.com/a?b=c",
    ],
    [
      "an ArrayBuffer as a Uint8Array",
      new Uint8Array([1, 2, 3]).buffer,
      new Uint8Array([1, 2, 3]),
    ],
    [
      "a DataView as a Uint8Array",
      new DataView(new Uint8Array([4, 5]).buffer),
      new Uint8Array([4, 5]),
    ],
    [
      "a Uint8ClampedArray as a Uint8Array",
      new Uint8ClampedArray([9, 255]),
      new Uint8Array([9, 255]),
    ],
  ];
  if (Float16) {
    cases.push([
      "a Float16Array as an array of numbers",
      new Float16([1.5, -2]),
      [1.5, -2],
    ]);
  }
  return cases;
}

function equalOrNormalized(
  actual: unknown,
  sent: unknown,
  normalized: unknown,
  label: string,
): void {
  const holes = Array.isArray(sent) ? Array.from(sent) : sent;
  for (const accepted of [sent, holes]) {
    try {
      assert.deepStrictEqual(actual, accepted);
      return;
    } catch {
      // Try the normalized form.
    }
  }
  assert.deepStrictEqual(
    actual,
    normalized,
    `echo of ${label}: neither the value nor its normalized form`,
  );
}

interface LogLine {
  line: string;
  stream: string;
}

function logCapture(): {
  lines: LogLine[];
  onStderr: (line: string, source: LogSource) => void;
} {
  const lines: LogLine[] = [];
  return {
    lines,
    onStderr: (line, source) => lines.push({ line, stream: source.stream }),
  };
}

function hasLine(lines: LogLine[], text: string): boolean {
  return lines.some((entry) => entry.line.includes(text));
}

let tokenCount = 0;

function token(prefix: string): string {
  return `${prefix}-${process.pid}-${++tokenCount}`;
}

// ---------------------------------------------------------------------------
// Raw frames on a spawned worker
// ---------------------------------------------------------------------------

interface RawWorker {
  pid: number;
  /** Messages read so far. */
  messages: Message[];
  /** The payload bytes (head plus attachment area) of each message read. */
  payloadBytes: WeakMap<Message, number>;
  /** Waits for a message matching `match`. */
  next(match: (message: Message) => boolean, what: string): Promise<Message>;
  /** Writes a message (or raw bytes). */
  send(message: Message | Uint8Array): void;
  /** Closes the worker's stdin. */
  end(): void;
  /** Settles with the exit code (or the signal name). */
  exited: Promise<number | string>;
  /** Kills it if still running. */
  kill(): void;
}

function spawnRaw(target: ConformanceTarget): RawWorker {
  const [program, ...args] = target.command;
  const child = spawn(program ?? "", args, {
    env: { NO_COLOR: "1", ...target.env },
    stdio: ["pipe", "pipe", "pipe"],
  });
  const messages: Message[] = [];
  const payloadBytes = new WeakMap<Message, number>();
  const waiters: (() => void)[] = [];
  const reader = new FrameReader({
    onFrame: (frame) => {
      const message = decodeMessage(frame);
      payloadBytes.set(message, frame.head.byteLength + frame.area.byteLength);
      messages.push(message);
      for (const wake of waiters.splice(0)) wake();
    },
    onStray: () => {},
  });
  child.stdout.on("data", (chunk: Uint8Array) => reader.push(chunk));
  child.stderr.on("data", () => {});
  child.stdin.on("error", () => {});
  const exited = new Promise<number | string>((resolve) => {
    child.on("exit", (code, signal) => resolve(code ?? signal ?? -1));
  });
  return {
    pid: child.pid ?? -1,
    messages,
    payloadBytes,
    async next(match, what) {
      const deadline = Date.now() + 15_000;
      while (true) {
        const found = messages.find(match);
        if (found) return found;
        if (Date.now() > deadline) {
          throw new Error(`Deadline: no ${what} within 15000 ms`);
        }
        await within(
          new Promise<void>((resolve) => waiters.push(resolve)),
          15_000,
          what,
        ).catch(() => {});
      }
    },
    send(message) {
      const chunks = message instanceof Uint8Array
        ? [message]
        : encodeMessage(message);
      for (const chunk of chunks) child.stdin.write(chunk);
    },
    end() {
      child.stdin.end();
    },
    exited,
    kill() {
      if (child.exitCode === null && child.signalCode === null) {
        child.kill("SIGKILL");
      }
    },
  };
}

async function withRaw(
  target: ConformanceTarget,
  fn: (worker: RawWorker) => Promise<void>,
): Promise<void> {
  const worker = spawnRaw(target);
  try {
    await fn(worker);
  } finally {
    worker.kill();
    await within(worker.exited, 10_000, "raw worker exit");
  }
}

function isResult(id: number): (message: Message) => boolean {
  return (message) =>
    (message.type === "result" || message.type === "error") &&
    message.id === id;
}

function isStreamEnd(id: number): (message: Message) => boolean {
  return (message) =>
    (message.type === "end" || message.type === "error") && message.id === id;
}

/** The values of the `items` messages of call `id` read so far, in order. */
function streamed(worker: RawWorker, id: number): unknown[] {
  return worker.messages.flatMap((m) =>
    m.type === "items" && m.id === id ? m.values : []
  );
}

/** The `items` messages of call `id` read so far. */
function itemMessages(worker: RawWorker, id: number): Message[] {
  return worker.messages.filter((m) => m.type === "items" && m.id === id);
}

/**
 * Reads a stream in raw frames as a parent does: credits every `items`
 * message as it arrives, until `end` or `error`.
 */
async function consume(
  worker: RawWorker,
  id: number,
): Promise<{ values: unknown[]; last: Message }> {
  // Messages already credited (a set: an index lookup per message made this
  // cubic in the number of batches).
  const credited = new Set<Message>();
  while (true) {
    const last = await worker.next(
      (m) =>
        (m.type === "items" && m.id === id && !credited.has(m)) ||
        isStreamEnd(id)(m),
      `the stream of call ${id}`,
    );
    if (last.type !== "items") return { values: streamed(worker, id), last };
    credited.add(last);
    worker.send({
      type: "credit",
      id,
      items: last.values.length,
      bytes: worker.payloadBytes.get(last) ?? 0,
    });
  }
}

// ---------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------

/**
 * Registers the conformance cases for one implementation. Call it at the
 * top level of a test file, after `checkNoLeaks()`.
 *
 * @param target The implementation: its name, command and environment.
 */
export function conformance(target: ConformanceTarget): void {
  const name = target.name;
  if (target.skip !== undefined) {
    test(
      `conformance (${name}): skipped, ${target.skip}`,
      skipUnless(target.skip),
      () => {},
    );
    return;
  }
  const label = target.command.at(-1) ?? name;
  const options = (
    extra: Partial<SessionOptions<ConformanceWorker>> = {},
  ): SessionOptions<ConformanceWorker> => ({
    command: target.command,
    ...(target.permissions === undefined
      ? {}
      : { permissions: target.permissions }),
    ...extra,
    env: { ...target.env, ...extra.env },
  });
  const open = (
    extra: Partial<SessionOptions<ConformanceWorker>> = {},
  ): Promise<Session<ConformanceWorker>> =>
    session<ConformanceWorker>(label, options(extra));

  describe(`conformance (${name}): values`, () => {
    const log = logCapture();
    let shared: Session<ConformanceWorker> | undefined;
    before(async () => {
      shared = await open({ onStderr: log.onStderr });
    });
    after(async () => {
      await shared?.close();
    });
    const s = (): Session<ConformanceWorker> => {
      assert.ok(shared, "the shared session started");
      return shared;
    };

    for (const [what, value] of exactValues()) {
      test(`echo returns ${what} exactly (${name})`, async () => {
        const back = await s().echo(value);
        assert.deepStrictEqual(back, value);
        if (Object.is(value, -0)) assert.ok(Object.is(back, -0), "-0 kept");
      });
    }

    test(`echo returns values a language may normalize, as sent or normalized (${name})`, async () => {
      for (const [what, value, normalized] of normalizedValues()) {
        equalOrNormalized(await s().echo(value), value, normalized, what);
      }
    });

    test(`echo returns many values in one message (${name})`, async () => {
      const all = exactValues().map(([, value]) => value);
      assert.deepStrictEqual(await s().echo(all), all);
    });

    test(`a result of 64 KiB and more arrives whole (${name})`, async () => {
      const back = await s().bytes(300_000);
      assert.ok(back instanceof Uint8Array);
      assert.deepStrictEqual(back, patterned(300_000));
    });

    test(`an unknown op fails with a TypeError listing the ops served (${name})`, async () => {
      const failure = await rejection(
        s().call("nope" as "echo", [1]),
        RemoteError,
      );
      assert.equal(failure.name, "TypeError");
      assert.match(failure.message, /nope/);
      assert.match(failure.message, /"echo"/);
      assert.match(failure.message, /"whoami"/);
    });

    test(`a handler's error keeps its name, message, properties, cause and stack (${name})`, async () => {
      const failure = await rejection(s().throwCustom(), RemoteError);
      assert.equal(failure.name, "CustomError");
      assert.equal(failure.message, "custom failure");
      assert.equal(failure.code, "E_CUSTOM");
      assert.deepEqual(failure.properties.detail, { table: "t1" });
      assert.equal(failure.op, "throwCustom");
      assert.equal(failure.pid, s().pid);
      assert.match(failure.remoteStack ?? "", /throw_?custom/i);
      assert.ok(failure.cause instanceof Error, "the cause is an error");
      assert.equal((failure.cause as Error).name, "TypeError");
      assert.equal((failure.cause as Error).message, "root cause");
    });

    test(`a result that cannot cross fails with a TypeError and the worker stays usable (${name})`, async () => {
      const failure = await rejection(s().returnUnsendable(), RemoteError);
      assert.equal(failure.name, "TypeError");
      assert.match(failure.message, /fn/);
      assert.equal(await s().add(2, 3), 5);
    });

    test(`print() output goes to the log, never into the frames (${name})`, async () => {
      const text = token("printed");
      assert.equal(await s().print(text), "printed");
      await until(() => hasLine(log.lines, text), 10_000, "the printed line");
      const entry = log.lines.find((line) => line.line.includes(text));
      assert.equal(entry?.stream, "stderr");
      assert.equal(await s().echo("still framed"), "still framed");
    });
  });

  describe(`conformance (${name}): concurrency, cancel and deadlines`, () => {
    test(`calls run at the same time and answer in any order (${name})`, async () => {
      await using s = await open({ onStderr: () => {} });
      const key = token("meet");
      const counts = await within(
        Promise.all(
          Array.from({ length: 4 }, () => s.rendezvous(key, 4, 10_000)),
        ),
        15_000,
        "4 concurrent calls",
      );
      for (const count of counts) assert.ok(count >= 4);
      const slow = s.delay(400, "slow");
      const fast = s.delay(5, "fast");
      assert.equal(await Promise.race([slow, fast]), "fast");
      assert.equal(await slow, "slow");
    });

    test(`aborting a call rejects with signal.reason and the handler sees the cancel (${name})`, async () => {
      const log = logCapture();
      await using s = await open({ onStderr: log.onStderr });
      const controller = new AbortController();
      const tag = token("abort");
      const pending = s.call("waitForCancel", [tag], {
        signal: controller.signal,
      });
      await until(
        () => hasLine(log.lines, `waiting ${tag}`),
        10_000,
        "the handler to start",
      );
      const reason = new Error("stop now");
      controller.abort(reason);
      assert.equal(await rejection(pending, Error), reason);
      await until(
        async () => (await s.cancelled()).includes(tag),
        10_000,
        "the handler to see its cancel",
      );
    });

    test(`a call past its deadline fails with WorkerTimeoutError, the handler sees the cancel, the worker stays (${name})`, async () => {
      const log = logCapture();
      await using s = await open({ onStderr: log.onStderr });
      const pid = s.pid;
      const tag = token("deadline");
      const failure = await rejection(
        s.call("waitForCancel", [tag], { timeoutMs: 500 }),
        WorkerTimeoutError,
      );
      assert.equal(failure.op, "waitForCancel");
      assert.equal(failure.phase, "call");
      await until(
        () => hasLine(log.lines, `waiting ${tag}`),
        10_000,
        "the handler to have run",
      );
      await until(
        async () => (await s.cancelled()).includes(tag),
        10_000,
        "the handler to see its cancel",
      );
      assert.equal(s.pid, pid, "one timeout keeps the worker");
    });
  });

  describe(`conformance (${name}): crashes and shutdown`, () => {
    test(`a SIGKILL fails every pending call with WorkerCrashedError, then a new worker serves (${name})`, async () => {
      await using s = await open({ onStderr: () => {} });
      const before = s.pid;
      const pending = Array.from(
        { length: 3 },
        () => rejection(s.hang(), WorkerCrashedError),
      );
      await s.stderr("last words");
      void s.crash().catch(() => {});
      const failures = await within(
        Promise.all(pending),
        15_000,
        "pending calls after a crash",
      );
      for (const failure of failures) {
        assert.equal(failure.signal, "SIGKILL");
        assert.equal(failure.exitCode, null);
        assert.equal(failure.pid, before);
        assert.equal(failure.op, "hang");
        assert.match(failure.stderrTail, /last words/);
      }
      assert.equal(await s.add(1, 2), 3);
      assert.notEqual(s.pid, before);
    });

    test(`a worker that exits reports its exit code (${name})`, async () => {
      await using s = await open({ onStderr: () => {} });
      const failure = await rejection(s.exitWith(3), WorkerCrashedError);
      assert.equal(failure.exitCode, 3);
      assert.equal(failure.signal, null);
    });

    test(`close() lets a call in flight finish, then the process is gone (${name})`, async () => {
      const s = await open({ onStderr: () => {} });
      const pid = s.pid;
      assert.equal(typeof pid, "number");
      const inFlight = s.delay(200, "finished");
      await within(s.close(), 15_000, "close()");
      assert.equal(await inFlight, "finished");
      assert.equal(isAlive(pid ?? -1), false, "the worker exited");
      await rejection(s.add(1, 1), SessionClosedError);
    });
  });

  describe(`conformance (${name}): modes, environment and directory`, () => {
    test(`oneShot() runs every call in a fresh process (${name})`, async () => {
      const fresh = oneShot<ConformanceWorker>(
        label,
        options({ onStderr: () => {} }),
      );
      assert.equal(await fresh.increment(), 1);
      assert.equal(await fresh.increment(), 1);
      const [a, b] = await Promise.all([fresh.whoami(), fresh.whoami()]);
      assert.notEqual(a, b);
    });

    test(`the worker sees only the env it is given, plus NO_COLOR, in its cwd (${name})`, async () => {
      const dir = realpathSync(mkdtempSync(join(tmpdir(), "airlock-conf-")));
      process.env.AIRLOCK_PARENT_ONLY = "parent";
      try {
        await using s = await open({
          onStderr: () => {},
          env: { AIRLOCK_CONFORMANCE: "yes" },
          cwd: dir,
        });
        assert.equal(await s.env("AIRLOCK_CONFORMANCE"), "yes");
        assert.equal(await s.env("NO_COLOR"), "1");
        assert.equal(await s.env("AIRLOCK_PARENT_ONLY"), null);
        assert.equal(realpathSync(await s.cwd()), dir);
      } finally {
        delete process.env.AIRLOCK_PARENT_ONLY;
        rmSync(dir, { recursive: true, force: true });
      }
    });

    test(`pool() spreads calls over up to max workers and replaces a crashed one (${name})`, async () => {
      await using p = pool<ConformanceWorker>(label, {
        ...options({ onStderr: () => {} }),
        max: 2,
        prewarm: 2,
      });
      // Both ready first: a second worker still starting when the first
      // has answered (a loaded machine) would rightly get no call.
      await until(() => p.stats().workers === 2, 20_000, "2 workers ready");
      const values = await within(
        Promise.all([p.delay(300, "a"), p.delay(300, "b")]),
        20_000,
        "2 calls on 2 workers",
      );
      assert.deepEqual(values, ["a", "b"]);
      const stats = p.stats();
      assert.equal(stats.workers, 2);
      assert.deepEqual(stats.perWorker.map((worker) => worker.calls), [1, 1]);
      const failure = await rejection(p.crash(), WorkerCrashedError);
      assert.equal(failure.signal, "SIGKILL");
      assert.equal(await p.add(20, 22), 42);
      assert.ok(p.stats().crashed >= 1);
    });

    test(`a worker of version 3 honours limit: calls written ahead start one at a time, in order (${name})`, async (t) => {
      if ((target.messageVersion ?? MESSAGE_VERSION) < 3) {
        t.skip("limit came with message version 3");
        return;
      }
      await withRaw(target, async (worker) => {
        const hello = await worker.next((m) => m.type === "hello", "hello");
        assert.ok(hello.type === "hello" && hello.concurrency >= 2);
        worker.send({ type: "limit", id: 0, concurrency: 1 });
        // Both written at once: without the limit they would run together
        // (the worker runs 4 at once); under limit 1 the second starts only
        // when the first ends (a lower bound: load only adds).
        const begun = Date.now();
        worker.send({ type: "call", id: 1, op: "delay", args: [250, "a"] });
        worker.send({ type: "call", id: 2, op: "delay", args: [250, "b"] });
        const second = await worker.next(isResult(2), "the second answer");
        const elapsed = Date.now() - begun;
        const first = worker.messages.find(isResult(1));
        assert.ok(first, "the first answer came before the second");
        assert.ok(
          worker.messages.indexOf(first) < worker.messages.indexOf(second),
          "answered in order",
        );
        assert.deepEqual(
          [first, second].map((m) => m.type === "result" && m.value),
          ["a", "b"],
        );
        assert.ok(elapsed >= 500, `ran one after the other: ${elapsed} ms`);
      });
    });

    test(`a worker of version 4 answers ping with pong while a call runs, and a cancelled queued call with dropped (${name})`, async (t) => {
      if ((target.messageVersion ?? MESSAGE_VERSION) < 4) {
        t.skip("ping and dropped came with message version 4");
        return;
      }
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        worker.send({ type: "limit", id: 0, concurrency: 1 });
        worker.send({ type: "call", id: 1, op: "delay", args: [1_000, "a"] });
        worker.send({ type: "call", id: 2, op: "delay", args: [10, "b"] });
        worker.send({ type: "ping", id: 0 });
        const pong = await worker.next(
          (m) => m.type === "pong" || isResult(1)(m),
          "the pong",
        );
        assert.equal(pong.type, "pong", "answered before the running call");
        worker.send({ type: "cancel", id: 2 });
        const dropped = await worker.next(
          (m) => m.id === 2,
          "the queued call's answer",
        );
        assert.equal(dropped.type, "dropped");
        const first = await worker.next(isResult(1), "the running call");
        assert.equal(first.type === "result" && first.value, "a");
      });
    });

    test(`pool() of concurrency 1 runs a worker's calls one at a time, written ahead or not (${name})`, async () => {
      await using p = pool<ConformanceWorker>(label, {
        ...options({ onStderr: () => {} }),
        max: 1,
        concurrency: 1,
        pipeline: 2,
      });
      assert.equal(await p.add(1, 1), 2);
      // Whether the second call is written ahead is the pool's choice (its
      // window adapts to the answers' pace, tests/parent/pool_pipeline_test.ts);
      // either way the worker runs one call at a time.
      const begun = Date.now();
      const both = Promise.all([p.delay(250, "a"), p.delay(250, "b")]);
      assert.deepEqual(await within(both, 20_000, "two calls"), ["a", "b"]);
      const elapsed = Date.now() - begun;
      assert.ok(elapsed >= 500, `ran one after the other: ${elapsed} ms`);
    });
  });

  describe(`conformance (${name}): streams and progress`, () => {
    for (const op of ["count", "countSync"] as const) {
      test(`${op}: a generator handler streams its values in order, in items messages, then end (${name})`, async () => {
        await withRaw(target, async (worker) => {
          await worker.next((m) => m.type === "hello", "hello");
          worker.send({ type: "call", id: 1, op, args: [3000] });
          const { values, last } = await consume(worker, 1);
          assert.equal(last.type, "end", JSON.stringify(last));
          assert.deepEqual(values, Array.from({ length: 3000 }, (_, i) => i));
          for (const message of itemMessages(worker, 1)) {
            if (message.type === "items") assert.ok(message.values.length > 0);
          }
          const after = worker.messages.slice(worker.messages.indexOf(last));
          assert.ok(
            !after.some((m) => m.id === 1 && m !== last),
            "nothing of the call follows its end",
          );
        });
      });
    }

    test(`a stream stops at its window of values until the parent gives credit (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        const tag = token("window");
        worker.send({
          type: "call",
          id: 1,
          op: "endless",
          args: [tag],
          windowItems: 8,
        });
        await until(
          () => streamed(worker, 1).length >= 8,
          15_000,
          "a window of values",
        );
        worker.send({ type: "call", id: 2, op: "streamState", args: [tag] });
        const state = await worker.next(isResult(2), "the stream's state");
        assert.equal(state.type, "result");
        const { produced } = (state as { value: { produced: number } }).value;
        assert.ok(produced <= 9, `produced ${produced} with a window of 8`);
        assert.equal(streamed(worker, 1).length, 8, "no value past the window");
        const sent = itemMessages(worker, 1);
        worker.send({
          type: "credit",
          id: 1,
          items: 8,
          bytes: sent.reduce(
            (n, m) => n + (worker.payloadBytes.get(m) ?? 0),
            0,
          ),
        });
        await until(
          () => streamed(worker, 1).length >= 16,
          15_000,
          "the next window",
        );
        worker.send({ type: "call", id: 3, op: "streamState", args: [tag] });
        await worker.next(isResult(3), "the stream's state");
        assert.equal(streamed(worker, 1).length, 16);
        assert.deepEqual(
          streamed(worker, 1),
          Array.from({ length: 16 }, (_, i) => i),
        );
        worker.send({ type: "cancel", id: 1 });
        await worker.next(isStreamEnd(1), "the cancelled stream's answer");
      });
    });

    test(`a stream stops at its window of bytes until the parent gives credit (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        const tag = token("bytes");
        worker.send({
          type: "call",
          id: 1,
          op: "endless",
          args: [tag],
          windowItems: 1000,
          windowBytes: 16,
        });
        await until(
          () => itemMessages(worker, 1).length >= 1,
          15_000,
          "the first items message",
        );
        worker.send({ type: "call", id: 2, op: "streamState", args: [tag] });
        await worker.next(isResult(2), "the stream's state");
        const sent = itemMessages(worker, 1);
        assert.equal(sent.length, 1, "one message fills a 16-byte window");
        const [first] = sent;
        assert.ok(first);
        worker.send({
          type: "credit",
          id: 1,
          items: first.type === "items" ? first.values.length : 0,
          bytes: worker.payloadBytes.get(first) ?? 0,
        });
        await until(
          () => itemMessages(worker, 1).length >= 2,
          15_000,
          "the message after the credit",
        );
        worker.send({ type: "cancel", id: 1 });
        await worker.next(isStreamEnd(1), "the cancelled stream's answer");
      });
    });

    test(`a cancel ends a stream: the generator's finally runs and the call is answered (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        const tag = token("early");
        worker.send({
          type: "call",
          id: 1,
          op: "endless",
          args: [tag],
          windowItems: 4,
        });
        await until(
          () => streamed(worker, 1).length >= 1,
          15_000,
          "a first value",
        );
        worker.send({ type: "cancel", id: 1 });
        const answer = await worker.next(isStreamEnd(1), "the answer");
        if (answer.type === "error") {
          assert.equal((answer.error as Error).name, "AbortError");
        }
        worker.send({ type: "call", id: 2, op: "streamState", args: [tag] });
        const state = await worker.next(isResult(2), "the stream's state");
        assert.deepEqual(
          (state as { value: { finished: boolean } }).value.finished,
          true,
          "the finally block ran",
        );
      });
    });

    test(`an error thrown mid-stream follows the values sent before it (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        worker.send({ type: "call", id: 1, op: "failAfter", args: [3] });
        const { values, last } = await consume(worker, 1);
        assert.deepEqual(values, [0, 1, 2]);
        assert.equal(last.type, "error");
        if (last.type === "error") {
          assert.equal((last.error as Error).name, "CustomError");
          assert.equal((last.error as Error).message, "stream failure");
        }
      });
    });

    test(`a session iterates a stream, break runs the generator's finally, an error follows the values (${name})`, async () => {
      await using s = await open({ onStderr: () => {} });
      const values: number[] = [];
      for await (const value of s.count(500)) values.push(value);
      assert.deepEqual(values, Array.from({ length: 500 }, (_, i) => i));
      assert.deepEqual(await s.countSync(3), [0, 1, 2]);
      const tag = token("break");
      for await (const value of s.endless(tag)) if (value === 20) break;
      await until(
        async () => (await s.streamState(tag))?.finished === true,
        10_000,
        "the generator's finally",
      );
      const seen: number[] = [];
      const failure = await rejection(async () => {
        for await (const value of s.failAfter(2)) seen.push(value);
      }, RemoteError);
      assert.deepEqual(seen, [0, 1]);
      assert.equal(failure.name, "CustomError");
      const reports: unknown[] = [];
      assert.equal(
        await s.call("report", [1000], {
          onProgress: (value) => reports.push(value),
        }),
        "reported",
      );
      assert.equal(reports.at(-1), 1000);
    });

    test(`progress is throttled, keeps the last value, and comes before the answer (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        worker.send({ type: "call", id: 1, op: "report", args: [5000] });
        const answer = await worker.next(isResult(1), "the answer");
        assert.deepEqual(answer, { type: "result", id: 1, value: "reported" });
        const reports = worker.messages.filter((m) =>
          m.type === "progress" && m.id === 1
        );
        assert.ok(reports.length >= 1, "at least one report");
        assert.ok(
          reports.length < 100,
          `${reports.length} reports of 5000: throttled`,
        );
        const last = reports.at(-1);
        assert.equal(last?.type === "progress" ? last.value : null, 5000);
        assert.ok(
          worker.messages.indexOf(last as Message) <
            worker.messages.indexOf(answer),
          "the last report comes before the answer",
        );
      });
    });
  });

  describe(`conformance (${name}): raw protocol`, () => {
    test(`the first frame is a hello with version, pid, ops, runtime, concurrency and idempotent ops (${name})`, async () => {
      await withRaw(target, async (worker) => {
        const hello = await worker.next(() => true, "the first frame");
        assert.equal(hello.type, "hello");
        if (hello.type !== "hello") return;
        assert.equal(hello.id, 0);
        assert.equal(hello.version, target.messageVersion ?? MESSAGE_VERSION);
        assert.equal(hello.pid, worker.pid);
        assert.deepEqual([...hello.ops].sort(), [...CONFORMANCE_OPS].sort());
        assert.match(hello.runtime, /^\S+ \S+/);
        assert.ok(hello.concurrency >= 4, "runs at least 4 calls at once");
        assert.deepEqual([...hello.idempotent].sort(), ["add", "echo"]);
      });
    });

    test(`stray bytes on stdin and a cancel for an unknown id are ignored (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        worker.send(new TextEncoder().encode("not a frame\n\x89AL"));
        worker.send({ type: "cancel", id: 999 });
        worker.send({ type: "call", id: 1, op: "add", args: [40, 2] });
        const answer = await worker.next(isResult(1), "the answer");
        assert.deepEqual(answer, { type: "result", id: 1, value: 42 });
      });
    });

    test(`shutdown finishes calls in flight, refuses new ones with ShutdownError, acknowledges and exits 0 (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        worker.send({ type: "call", id: 1, op: "delay", args: [300, "late"] });
        worker.send({ type: "shutdown", id: 0 });
        worker.send({ type: "call", id: 2, op: "add", args: [1, 1] });
        const refused = await worker.next(isResult(2), "the refusal");
        assert.equal(refused.type, "error");
        if (refused.type === "error") {
          assert.equal((refused.error as Error).name, "ShutdownError");
        }
        const ack = await worker.next(
          (m) => m.type === "shutdown-ack",
          "shutdown-ack",
        );
        assert.equal(ack.id, 0);
        const order = worker.messages.map((m) => `${m.type}:${m.id}`);
        assert.ok(
          order.indexOf("result:1") !== -1 &&
            order.indexOf("result:1") < order.indexOf("shutdown-ack:0"),
          `the call in flight is answered before the ack: ${order.join(" ")}`,
        );
        assert.equal(await within(worker.exited, 10_000, "exit"), 0);
      });
    });

    test(`end-of-file on stdin ends the worker promptly, even with a call in flight (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        worker.send({ type: "call", id: 1, op: "hang", args: [] });
        worker.send({ type: "call", id: 2, op: "add", args: [1, 2] });
        await worker.next(isResult(2), "a call answered");
        worker.end();
        await within(worker.exited, 5_000, "exit after end-of-file");
      });
    });

    test(`a frame claiming more than maxFrameBytes makes the worker exit without reading it (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        const header = new Uint8Array(16);
        header.set([0x89, 0x41, 0x4c, 0x4b, 1, 0, 0, 0]);
        new DataView(header.buffer).setUint32(8, 0xffffffff);
        new DataView(header.buffer).setUint32(12, 16);
        worker.send(header);
        const code = await within(worker.exited, 5_000, "exit");
        assert.notEqual(code, 0);
      });
    });

    test(`a frame of another protocol version makes the worker exit (${name})`, async () => {
      await withRaw(target, async (worker) => {
        await worker.next((m) => m.type === "hello", "hello");
        const [frame] = encodeMessage({ type: "cancel", id: 1 });
        const bad = Uint8Array.from(frame ?? []);
        bad[4] = 2;
        worker.send(bad);
        const code = await within(worker.exited, 5_000, "exit");
        assert.notEqual(code, 0);
      });
    });
  });
}
