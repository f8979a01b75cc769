// The `@ts-expect-error` lines are the type tests: `deno test` and `deno
// check` fail if a reserved handler name type-checks. The same calls run and
// must throw, so the runtime check is proven too.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  defineWorker,
  type Handler,
  RESERVED_NAMES,
  type ReservedName,
} from "../../worker.ts";

/** Asserts a definition is refused for a reserved name, naming it. */
function assertReserved(define: () => unknown, name: string): void {
  assert.throws(define, (error: unknown) => {
    assert.ok(error instanceof TypeError);
    assert.match(error.message, new RegExp(`"${name}" is reserved`));
    return true;
  });
}

describe("defineWorker()", () => {
  test("defineWorker() refuses reserved handler names in its type and when called", () => {
    // @ts-expect-error close is a session's own method
    assertReserved(() => defineWorker({ close() {} }), "close");
    // @ts-expect-error then would make the proxy thenable
    assertReserved(() => defineWorker({ then() {} }), "then");
    assertReserved(
      // @ts-expect-error stream is on every mode's surface
      () => defineWorker({ async *stream() {} }),
      "stream",
    );
    assertReserved(
      () =>
        defineWorker({
          query(text: string) {
            return text;
          },
          // @ts-expect-error a reserved name beside allowed ones
          stats() {
            return 1;
          },
        }),
      "stats",
    );
    assertReserved(
      // @ts-expect-error pid, in an object built beforehand
      () => defineWorker(handlersWithPid),
      "pid",
    );
    assertReserved(
      // @ts-expect-error toString, a name every object inherits
      () => defineWorker({ toString: () => "x" }),
      "toString",
    );
  });

  test("defineWorker() types allowed handlers as given, this included", () => {
    const definition = defineWorker({
      add(a: number, b: number) {
        assert.ok(this.signal instanceof AbortSignal);
        return a + b;
      },
      async *rows(n: number) {
        for (let i = 0; i < n; i++) yield i;
      },
      // A name close to a reserved one is fine.
      closeAll() {},
    }, { idempotent: ["add"] });
    const sum: number = definition.handlers.add.call(
      {
        signal: new AbortController().signal,
        op: "add",
        id: 1,
        pid: 1,
        progress() {},
      },
      1,
      2,
    );
    assert.equal(sum, 3);
    assert.deepEqual(definition.idempotent, ["add"]);
    // @ts-expect-error idempotent ops are handler names
    assert.throws(() => defineWorker({ a() {} }, { idempotent: ["b"] }));
  });

  test("defineWorker() of handlers typed by an index signature checks names when called", () => {
    const handlers: Record<string, Handler> = { ok: () => 1 };
    assert.deepEqual(Object.keys(defineWorker(handlers).handlers), ["ok"]);
    const built: Record<string, Handler> = { close: () => 1 };
    assertReserved(() => defineWorker(built), "close");
  });

  test("RESERVED_NAMES lists every ReservedName, stream included", () => {
    const names: readonly ReservedName[] = [
      "then",
      "call",
      "stream",
      "close",
      "restart",
      "stats",
      "pid",
    ];
    for (const name of names) assert.ok(RESERVED_NAMES.includes(name), name);
  });
});

const handlersWithPid = {
  pid() {
    return 1;
  },
};
