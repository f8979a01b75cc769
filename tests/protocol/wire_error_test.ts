import { describe, test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { ProtocolError } from "../../src/errors.ts";
import { buildError } from "../../src/protocol/wire_error.ts";
import { valueArb } from "./_arbitraries.ts";

/** Checks what buildError promises of the errors it returns. */
function assertPrintable(error: Error): void {
  assert.ok(error instanceof Error);
  assert.equal(typeof error.name, "string");
  assert.equal(typeof error.message, "string");
  assert.ok(error.stack === undefined || typeof error.stack === "string");
  assert.equal(typeof String(error), "string");
  assert.equal(typeof `${error}`, "string");
  assert.equal(typeof Object.prototype.toString.call(error), "string");
  let chain = 1;
  for (let e: unknown = error.cause; e instanceof Error; e = e.cause) chain++;
  assert.ok(chain <= 16, `a cause chain of ${chain} errors`);
}

describe("buildError()", () => {
  test("buildError() rebuilds name, message, stack, cause and own properties", () => {
    const cause = new Error("inner");
    const error = buildError({
      name: "TypeError",
      message: "m",
      stack: "TypeError: m\n    at x",
      cause,
      code: "E_X",
    });
    assert.ok(error instanceof TypeError);
    assert.equal(error.message, "m");
    assert.equal(error.stack, "TypeError: m\n    at x");
    assert.equal(error.cause, cause);
    assert.equal((error as unknown as { code: string }).code, "E_X");
  });

  test("buildError() leaves out fields named after inherited methods, so the error stays printable", () => {
    const error = buildError({
      name: "Error",
      message: "m",
      toString: "x",
      valueOf: "y",
      constructor: "z",
      hasOwnProperty: 1,
      ["__proto__"]: { polluted: true },
      code: "kept",
    });
    assertPrintable(error);
    assert.equal(String(error), "Error: m");
    assert.deepEqual(Object.keys(error), ["__proto__", "code"]);
    assert.equal(Object.getPrototypeOf(error), Error.prototype);
    assert.equal(({} as { polluted?: boolean }).polluted, undefined);
  });

  test("buildError() accepts fields with a null prototype", () => {
    const fields = Object.assign(Object.create(null) as object, {
      name: "RangeError",
      message: "m",
    });
    const error = buildError(fields as Record<string, unknown>);
    assert.ok(error instanceof RangeError);
    assertPrintable(error);
  });

  test("buildError() refuses a name, message or stack that is not text with a ProtocolError", () => {
    for (
      const fields of [
        { name: { toString: "x" }, message: "m" },
        { name: "Error", message: 1 },
        { name: "Error" },
        { name: "Error", message: "m", stack: { toString: "x" } },
      ]
    ) {
      assert.throws(
        () => buildError(fields as Record<string, unknown>),
        (error: unknown) =>
          error instanceof ProtocolError &&
          /^Cannot decode value: an error \(tag 27001\)/.test(error.message),
      );
    }
  });

  test("buildError() turns fields that cannot be read into a ProtocolError", () => {
    const getter = {
      get name(): string {
        throw new Error("boom");
      },
      message: "m",
    };
    const proxy = new Proxy({ name: "Error", message: "m" }, {
      ownKeys() {
        throw new Error("boom");
      },
    });
    for (const fields of [getter, proxy, null, 7]) {
      assert.throws(
        () => buildError(fields as unknown as Record<string, unknown>),
        ProtocolError,
      );
    }
  });

  test("buildError() cuts a cause chain after 16 errors", () => {
    let error: Error = buildError({ name: "Error", message: "0" });
    for (let i = 1; i < 500; i++) {
      error = buildError({ name: "Error", message: String(i), cause: error });
    }
    assertPrintable(error);
    let last = error;
    let chain = 1;
    while (last.cause instanceof Error) {
      last = last.cause;
      chain++;
    }
    assert.equal(chain, 16);
    assert.equal(last.message, "484");
    assert.equal(Object.hasOwn(last, "cause"), false);
  });

  test("buildError() returns a printable error or throws a ProtocolError for any decoded fields", () => {
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.oneof(
            fc.constantFrom(
              "name",
              "message",
              "stack",
              "cause",
              "errors",
              "toString",
              "valueOf",
              "__proto__",
            ),
            fc.string({ maxLength: 6 }),
          ),
          fc.oneof(fc.string({ maxLength: 8 }), valueArb),
          { maxKeys: 6 },
        ),
        fc.constantFrom("Error", "AggregateError", "TypeError", "Custom"),
        fc.boolean(),
        (fields, name, named) => {
          if (named) fields.name = name;
          let error: Error;
          try {
            error = buildError(fields);
          } catch (thrown: unknown) {
            assert.ok(thrown instanceof ProtocolError, String(thrown));
            return;
          }
          assertPrintable(error);
        },
      ),
      { numRuns: 500 },
    );
  });
});
