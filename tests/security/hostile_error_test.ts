// A hostile thrown value: whatever a handler throws (an object whose
// toString is not a function, a null prototype, symbol keys, a throwing
// getter, a huge message, a cyclic cause), the call settles with a typed
// error in every mode, and the parent's rebuild of the error never throws.
// 0.1 left the call pending forever: the connection removed the call, then
// String(value) threw while building the RemoteError.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  AirlockError,
  oneShot,
  pool,
  RemoteError,
  session,
} from "../../mod.ts";
import {
  describeValue,
  toRemoteError,
} from "../../src/parent/_remote_error.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { within } from "../_helpers/wait.ts";

checkNoLeaks();

const hostile = fixture("security/hostile_error_worker.ts");
const where = { module: "w.ts", op: "op", pid: 1 };
/** Far beyond the deadline each call is given to settle. */
const CALL_TIMEOUT_MS = 300_000;
const SETTLE_MS = 60_000;

/** What each hostile value is expected to settle as. */
const EXPECTED: Record<string, (error: RemoteError) => void> = {
  toStringNotFunction: (error) =>
    assert.match(
      error.message,
      /non-error value: an object with keys "toString"/,
    ),
  noPrimitive: (error) => assert.match(error.message, /non-error value/),
  nullPrototype: (error) => assert.match(error.message, /non-error value/),
  symbolKeyed: (error) => assert.match(error.message, /non-error value/),
  throwingGetter: (error) =>
    assert.match(error.message, /Cannot send the value the handler threw/),
  hugeMessage: (error) => assert.equal(error.message.length, 8 * 1024 * 1024),
  cyclicCause: (error) => {
    assert.equal(error.message, "outer");
    assert.ok(error.cause instanceof Error);
  },
  errorBadName: (error) => assert.equal(error.message, "named"),
  errorThrowingMessage: (error) => assert.equal(typeof error.message, "string"),
  errorHostileCode: (error) => assert.equal(error.message, "coded"),
};
const KINDS = Object.keys(EXPECTED);

async function settlesAsRemote(
  kind: string,
  promise: Promise<unknown>,
): Promise<void> {
  const error = await within(
    promise.then(
      () => assert.fail(`"${kind}" resolved`),
      (error: unknown) => error,
    ),
    SETTLE_MS,
    `the call throwing "${kind}"`,
  );
  assert.ok(error instanceof RemoteError, `${kind}: ${String(error)}`);
  assert.equal(error.op, "throwValue");
  EXPECTED[kind]!(error);
}

/** Values no wire can carry, but the rebuild must survive anyway. */
function exotic(): Record<string, unknown> {
  const throwing = new Proxy({}, {
    get() {
      throw new Error("get trap");
    },
    getPrototypeOf() {
      throw new Error("getPrototypeOf trap");
    },
    ownKeys() {
      throw new Error("ownKeys trap");
    },
    getOwnPropertyDescriptor() {
      throw new Error("getOwnPropertyDescriptor trap");
    },
    has() {
      throw new Error("has trap");
    },
  });
  const revocable = Proxy.revocable({}, {});
  revocable.revoke();
  const errorProxy = new Proxy(new Error("e"), {
    get() {
      throw new Error("get trap");
    },
    ownKeys() {
      throw new Error("ownKeys trap");
    },
  });
  const getters = new Error("getters");
  for (const key of ["name", "message", "stack", "cause", "code"]) {
    Object.defineProperty(getters, key, {
      enumerable: true,
      get(): never {
        throw new Error(`${key} getter`);
      },
    });
  }
  const cyclic = new Error("cyclic");
  cyclic.cause = cyclic;
  return {
    throwing,
    revoked: revocable.proxy,
    errorProxy,
    getters,
    cyclic,
    toString: { toString: "x" },
    noPrimitive: { toString: 1, valueOf: 2, [Symbol.toPrimitive]: 3 },
    nullPrototype: Object.create(null),
    symbol: Symbol("s"),
    symbolKeyed: { [Symbol("s")]: 1 },
    tag: { [Symbol.toStringTag]: { toString: "x" } },
    huge: "h".repeat(16 * 1024 * 1024),
    hugeError: new Error("h".repeat(16 * 1024 * 1024)),
    protoKey: JSON.parse('{"__proto__": {"polluted": true}}'),
    bigint: 10n ** 30n,
  };
}

describe("hostile thrown values", () => {
  test("toRemoteError() returns a RemoteError for any value and never throws", () => {
    for (const [name, value] of Object.entries(exotic())) {
      const error = toRemoteError(value, where);
      assert.ok(error instanceof RemoteError, name);
      assert.ok(error instanceof AirlockError, name);
      assert.equal(typeof error.message, "string", name);
      assert.equal(typeof error.name, "string", name);
      assert.equal(error.op, "op", name);
      assert.equal(String(error).length > 0, true, name);
    }
    const cyclic = toRemoteError(exotic().cyclic, where);
    assert.equal(cyclic.message, "cyclic");
    assert.equal((cyclic.cause as Error).message, "cyclic");
    const proto = toRemoteError(exotic().protoKey, where);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.match(proto.message, /keys "__proto__"/);
  });

  test("describeValue() describes any value in at most about 200 characters without calling its code", () => {
    for (const [name, value] of Object.entries(exotic())) {
      const text = describeValue(value);
      assert.equal(typeof text, "string", name);
      assert.ok(text.length <= 240, `${name}: ${text.length}`);
    }
    assert.equal(
      describeValue({ toString: "x" }),
      'an object with keys "toString"',
    );
    assert.equal(
      describeValue(Object.create(null)),
      "an object without prototype",
    );
    assert.equal(describeValue(new TypeError("t")), "TypeError: t");
    assert.equal(describeValue([1, 2]), "an array of 2 items");
  });

  test("session() settles every call whose handler throws a hostile value, and keeps serving", async () => {
    await using s = await session(hostile, {
      ...captureLog(),
      callTimeoutMs: CALL_TIMEOUT_MS,
    });
    const pid = s.pid;
    for (const kind of KINDS) {
      await settlesAsRemote(kind, s.call("throwValue", [kind]));
    }
    assert.equal(await s.call("ok", []), "ok");
    assert.equal(s.pid, pid, "the same worker served every call");
  });

  test("pool() settles every call whose handler throws a hostile value, and keeps serving", async () => {
    await using p = pool(hostile, {
      ...captureLog(),
      max: 2,
      callTimeoutMs: CALL_TIMEOUT_MS,
    });
    await Promise.all(
      KINDS.map((kind) => settlesAsRemote(kind, p.call("throwValue", [kind]))),
    );
    assert.equal(await p.call("ok", []), "ok");
    assert.equal(p.stats().crashed, 0);
  });

  test("oneShot() settles every call whose handler throws a hostile value", async () => {
    const fresh = oneShot(hostile, {
      ...captureLog(),
      callTimeoutMs: CALL_TIMEOUT_MS,
    });
    for (const kind of KINDS) {
      await settlesAsRemote(kind, fresh.call("throwValue", [kind]));
    }
  });
});
