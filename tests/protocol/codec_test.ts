import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import fc from "fast-check";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import {
  ATTACHMENT_THRESHOLD_BYTES,
  encodeValue,
} from "../../src/protocol/encode_value.ts";
import { ProtocolError } from "../../src/errors.ts";
import { concat } from "./_arbitraries.ts";
import {
  assertProtocolError,
  assertSame,
  bytes,
  Float16,
  hex,
  richValueArb as valueArb,
  roundTrip,
} from "./_codec.ts";

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

describe("encodeValue() and decodeValue() round trips", () => {
  test("encodeValue() then decodeValue() gives back every supported value", () => {
    fc.assert(
      fc.property(valueArb, (value) => {
        assertSame(roundTrip(value), value);
      }),
      { numRuns: 400 },
    );
  });

  test("encodeValue() with a small attachment threshold round-trips through attachments", () => {
    fc.assert(
      fc.property(valueArb, fc.nat({ max: 12 }), (value, threshold) => {
        assertSame(roundTrip(value, threshold), value);
      }),
      { numRuns: 300 },
    );
  });

  test("encodeValue() writes a call message as a map with text keys", () => {
    const message = { type: "call", id: 3, op: "query", args: [1, "x"] };
    const { head, attachments, attachmentBytes } = encodeValue(message);
    assert.equal(
      hex(head),
      "a4 64 74 79 70 65 64 63 61 6c 6c 62 69 64 03 62 6f 70 65 71 75 65 72 79 64 61 72 67 73 82 01 61 78",
    );
    assert.deepEqual(attachments, []);
    assert.equal(attachmentBytes, 0);
    assertSame(decodeValue(head), message);
  });

  test("encodeValue() returns a head the next encode does not overwrite", () => {
    const first = encodeValue("first value").head;
    encodeValue("second value, which is longer");
    assert.equal(decodeValue(first), "first value");
  });

  test("encodeValue() and decodeValue() keep every typed array kind", () => {
    const buffer = new ArrayBuffer(64);
    new Uint8Array(buffer).forEach((_, i, a) => (a[i] = i * 7));
    const values: unknown[] = [
      new Uint8Array(buffer, 1, 5),
      new Uint8ClampedArray(buffer, 3, 4),
      new Uint16Array(buffer, 2, 3),
      new Uint32Array(buffer, 4, 3),
      new BigUint64Array(buffer, 8, 2),
      new Int8Array(buffer, 5, 6),
      new Int16Array(buffer, 6, 2),
      new Int32Array(buffer, 8, 4),
      new BigInt64Array(buffer, 16, 3),
      new Float32Array(buffer, 4, 4),
      new Float64Array(buffer, 8, 3),
      new DataView(buffer, 3, 9),
      buffer.slice(5, 20),
      new Float64Array([NaN, -0, Infinity, 1.5]),
      new Uint16Array(0),
    ];
    if (Float16 !== undefined) values.push(new Float16(buffer.slice(0, 12)));
    for (const threshold of [undefined, 0, 8]) {
      assertSame(roundTrip(values, threshold), values);
    }
  });

  test("encodeValue() sends a Node Buffer as a plain byte string", () => {
    const { head } = encodeValue(Buffer.from("hi"));
    assert.equal(hex(head), "42 68 69");
    const decoded = decodeValue(head);
    assert.equal(Object.getPrototypeOf(decoded), Uint8Array.prototype);
    const fromBuffer = decodeValue(Buffer.from(head));
    assert.equal(Object.getPrototypeOf(fromBuffer), Uint8Array.prototype);
  });

  test("encodeValue() writes integers in the shortest form and other numbers as float64", () => {
    const cases: [unknown, string][] = [
      [0, "00"],
      [23, "17"],
      [24, "18 18"],
      [255, "18 ff"],
      [256, "19 01 00"],
      [65536, "1a 00 01 00 00"],
      [-1, "20"],
      [-25, "38 18"],
      [2 ** 32, "1b 00 00 00 01 00 00 00 00"],
      [Number.MAX_SAFE_INTEGER, "1b 00 1f ff ff ff ff ff ff"],
      [Number.MIN_SAFE_INTEGER, "3b 00 1f ff ff ff ff ff fe"],
      [2 ** 53, "fb 43 40 00 00 00 00 00 00"],
      [-0, "fb 80 00 00 00 00 00 00 00"],
      [1.5, "fb 3f f8 00 00 00 00 00 00"],
      [0n, "c2 40"],
      [-1n, "c3 40"],
      [256n, "c2 42 01 00"],
      [2n ** 64n - 1n, "c2 48 ff ff ff ff ff ff ff ff"],
      [2n ** 64n, "c2 49 01 00 00 00 00 00 00 00 00"],
      [-(2n ** 64n) - 1n, "c3 49 01 00 00 00 00 00 00 00 00"],
      [true, "f5"],
      [undefined, "f7"],
      [new Date(1500), "c1 fb 3f f8 00 00 00 00 00 00"],
      [/a/, "d8 23 61 61"],
      [/a/g, "d8 23 82 61 61 61 67"],
      [new URL("http://a.b/"), "d8 20 6b 68 74 74 70 3a 2f 2f 61 2e 62 2f"],
      [new Set([1]), "d9 01 02 81 01"],
      [new Map([[1, 2]]), "d9 01 03 a1 01 02"],
      [new ArrayBuffer(1), "d9 69 7a 41 00"],
      [new Int16Array([1]), "d8 4d 42 01 00"],
    ];
    for (const [value, expected] of cases) {
      assert.equal(hex(encodeValue(value).head), expected, String(value));
    }
  });

  test("decodeValue() reads integers around 2^53 and u64 max as number or bigint", () => {
    const cases: [string, unknown][] = [
      ["1b 00 1f ff ff ff ff ff ff", 2 ** 53 - 1],
      ["1b 00 20 00 00 00 00 00 00", 2n ** 53n],
      ["1b 00 20 00 00 00 00 00 01", 2n ** 53n + 1n],
      ["1b ff ff ff ff ff ff ff ff", 2n ** 64n - 1n],
      ["3b 00 1f ff ff ff ff ff fe", -(2 ** 53 - 1)],
      ["3b 00 1f ff ff ff ff ff ff", -(2n ** 53n)],
      ["3b 00 20 00 00 00 00 00 00", -(2n ** 53n) - 1n],
      ["3b ff ff ff ff ff ff ff ff", -(2n ** 64n)],
      ["1a ff ff ff ff", 2 ** 32 - 1],
      ["39 ff ff", -65536],
      ["c2 40", 0n],
      ["c2 43 01 00 00", 65536n],
      ["c3 42 01 00", -257n],
      ["c2 47 01 00 00 00 00 00 00", 2n ** 48n],
    ];
    for (const [input, expected] of cases) {
      const head = new Uint8Array(input.split(" ").map((b) => parseInt(b, 16)));
      assertSame(decodeValue(head), expected);
    }
    assertSame(roundTrip(2 ** 53 + 2), 2 ** 53 + 2);
    assertSame(roundTrip(2n ** 53n + 1n), 2n ** 53n + 1n);
    assertSame(roundTrip(-(2n ** 53n) - 1n), -(2n ** 53n) - 1n);
    assertSame(roundTrip(12345678901234567890n), 12345678901234567890n);
    assertSame(roundTrip(2 ** 53 - 1), 2 ** 53 - 1);
    assertSame(roundTrip(5n), 5n);
  });

  test("encodeValue() and decodeValue() keep bigints of every size, up to 64 KiB of bytes", () => {
    const values = [
      2n ** 64n,
      -(2n ** 64n) - 1n,
      2n ** 524288n - 1n,
      -(3n ** 100_000n),
      BigInt(`0x${"0123456789abcdef".repeat(1000)}`),
    ];
    for (const value of values) assert.equal(roundTrip(value), value);
    // Leading zero bytes on the wire are allowed.
    assert.equal(
      decodeValue(bytes(0xc2, 0x4a, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2)),
      0x0102n,
    );
  });

  test("decodeValue() reads half, single and double precision floats", () => {
    const cases: [number[], number][] = [
      [[0xf9, 0x3c, 0x00], 1],
      [[0xf9, 0x80, 0x00], -0],
      [[0xf9, 0x00, 0x01], 2 ** -24],
      [[0xf9, 0x03, 0xff], 0.00006097555160522461],
      [[0xf9, 0x7b, 0xff], 65504],
      [[0xf9, 0xc4, 0x00], -4],
      [[0xf9, 0x7c, 0x00], Infinity],
      [[0xf9, 0xfc, 0x00], -Infinity],
      [[0xf9, 0x7e, 0x00], NaN],
      [[0xfa, 0x47, 0xc3, 0x50, 0x00], 100000],
      [[0xfa, 0x7f, 0x80, 0x00, 0x00], Infinity],
      [[0xfb, 0x3f, 0xf1, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a], 1.1],
    ];
    for (const [input, expected] of cases) {
      assertSame(decodeValue(new Uint8Array(input)), expected);
    }
  });

  test("encodeValue() and decodeValue() keep strings of every size and script", () => {
    const samples = [
      "",
      "a",
      "x".repeat(23),
      "x".repeat(24),
      "é".repeat(12),
      "é".repeat(40),
      "€".repeat(85),
      "€".repeat(86),
      "y".repeat(255),
      "y".repeat(256),
      "z".repeat(65535),
      "z".repeat(65536),
      "𝄞 clef",
      "\uFEFF starts with a BOM",
      "\u0000nul",
      `${"a".repeat(63)}é`,
    ];
    for (const s of samples) assert.equal(roundTrip(s), s);
    assert.equal(roundTrip("lone \uD800 surrogate"), "lone \uFFFD surrogate");
  });

  test("encodeValue() and decodeValue() keep dates, invalid ones included", () => {
    const dates = [
      new Date(0),
      new Date(-1),
      new Date(8.64e15),
      new Date(-8.64e15),
      new Date(1_700_000_000_123),
      new Date(NaN),
    ];
    assertSame(roundTrip(dates), dates);
    fc.assert(
      fc.property(fc.integer({ min: -8.64e15, max: 8.64e15 }), (ms) => {
        assert.equal((roundTrip(new Date(ms)) as Date).getTime(), ms);
      }),
      { numRuns: 2000 },
    );
  });

  test("encodeValue() turns array holes into undefined", () => {
    // deno-lint-ignore no-sparse-arrays
    const decoded = roundTrip([1, , 3]) as unknown[];
    assert.equal(decoded.length, 3);
    assert.ok(1 in decoded);
    assert.equal(decoded[1], undefined);
  });

  test("encodeValue() leaves out symbol keys and non-enumerable properties", () => {
    const value: Record<string | symbol, unknown> = { a: 1 };
    value[Symbol("s")] = 2;
    Object.defineProperty(value, "hidden", { value: 3, enumerable: false });
    assertSame(roundTrip(value), { a: 1 });
  });

  test("encodeValue() sends an object with a null prototype as a plain object", () => {
    const value = Object.assign(Object.create(null) as object, { a: 1 });
    assertSame(roundTrip(value), { a: 1 });
  });

  test("decodeValue() makes a __proto__ key an own property, never the prototype", () => {
    const value = JSON.parse('{"__proto__": {"polluted": true}, "b": 1}');
    const decoded = roundTrip(value) as Record<string, unknown>;
    assert.equal(Object.getPrototypeOf(decoded), Object.prototype);
    assert.ok(Object.hasOwn(decoded, "__proto__"));
    assert.deepEqual(Object.keys(decoded), ["__proto__", "b"]);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.equal((decoded as { polluted?: unknown }).polluted, undefined);
    // Inside an error's properties too.
    const error = new Error("x");
    Object.defineProperty(error, "__proto__", {
      value: { polluted: true },
      enumerable: true,
    });
    const decodedError = roundTrip(error) as Record<string, unknown>;
    assert.ok(Object.hasOwn(decodedError, "__proto__"));
    assert.ok(decodedError instanceof Error);
  });
});

// ---------------------------------------------------------------------------
// Attachments and views
// ---------------------------------------------------------------------------

describe("encodeValue() attachments", () => {
  test("encodeValue() sends binary at or above the threshold as views laid out back to back", () => {
    const big = new Uint8Array(10).fill(1);
    const floats = new Float32Array([1, 2, 3, 4]);
    const small = new Uint8Array([9, 9]);
    const { head, attachments, attachmentBytes } = encodeValue(
      { big, floats, small, again: big },
      { attachmentThresholdBytes: 8 },
    );
    assert.equal(attachments.length, 3);
    assert.equal(attachmentBytes, 10 + 16 + 10);
    assert.equal(attachments[0]!.buffer, big.buffer);
    assert.equal(attachments[1]!.buffer, floats.buffer);
    // [offset, length] of each attachment, in order.
    assert.ok(hex(head).includes("d9 69 78 82 00 0a"));
    assert.ok(hex(head).includes("d8 55 d9 69 78 82 0a 10"));
    assert.ok(hex(head).includes("d9 69 78 82 18 1a 0a"));
    const area = concat(attachments);
    const decoded = decodeValue(head, area) as Record<string, ArrayBufferView>;
    assert.equal(decoded.big!.buffer, area.buffer);
    assertSame(decoded, { big, floats, small, again: big });
  });

  test("encodeValue() defaults to a threshold of 64 KiB", () => {
    assert.equal(ATTACHMENT_THRESHOLD_BYTES, 65536);
    const below = encodeValue(new Uint8Array(65535));
    assert.equal(below.attachments.length, 0);
    const at = encodeValue(new Uint8Array(65536));
    assert.equal(at.attachments.length, 1);
    assert.equal(at.head.length, 3 + 1 + 1 + 5);
  });

  test("encodeValue() rejects a threshold that is not a non-negative number", () => {
    assert.throws(
      () => encodeValue(1, { attachmentThresholdBytes: -1 }),
      RangeError,
    );
    assert.throws(
      () => encodeValue(1, { attachmentThresholdBytes: NaN }),
      RangeError,
    );
  });

  test("decodeValue() returns views into the head when alignment allows, copies otherwise", () => {
    const { head } = encodeValue([
      new Uint8Array([1, 2]),
      new Float64Array([1.5]),
    ]);
    // The float64 payload is the last 8 bytes; shift the head to try every
    // alignment of it.
    for (const shift of [0, 1, 2, 3, 4, 5, 6, 7]) {
      const shifted = new Uint8Array(head.length + shift);
      shifted.set(head, shift);
      const input = shifted.subarray(shift);
      const [u8, f64] = decodeValue(input) as [Uint8Array, Float64Array];
      assert.equal(u8.buffer, shifted.buffer);
      assert.equal(f64[0], 1.5);
      const aligned = (shift + head.length - 8) % 8 === 0;
      assert.equal(f64.buffer === shifted.buffer, aligned);
    }
  });

  test("decodeValue() copies an ArrayBuffer out of the head", () => {
    const { head } = encodeValue(new Uint8Array([1, 2, 3]).buffer);
    const decoded = decodeValue(head) as ArrayBuffer;
    assert.ok(decoded instanceof ArrayBuffer);
    assert.notEqual(decoded, head.buffer);
    assert.deepEqual([...new Uint8Array(decoded)], [1, 2, 3]);
  });

  test("decodeValue() rejects an attachment outside the area", () => {
    const { head } = encodeValue(new Uint8Array(10), {
      attachmentThresholdBytes: 1,
    });
    assert.throws(() => decodeValue(head), ProtocolError);
    assert.throws(() => decodeValue(head, new Uint8Array(9)), ProtocolError);
    assert.equal(
      (decodeValue(head, new Uint8Array(10)) as Uint8Array).length,
      10,
    );
  });
});

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

describe("encodeValue() and decodeValue() errors", () => {
  test("decodeValue() rebuilds standard error classes with name, message, stack and props", () => {
    const error = Object.assign(new RangeError("too big"), { code: "E_BIG" });
    const decoded = roundTrip(error) as RangeError & { code: string };
    assert.ok(decoded instanceof RangeError);
    assert.equal(decoded.name, "RangeError");
    assert.equal(decoded.message, "too big");
    assert.equal(decoded.stack, error.stack);
    assert.equal(decoded.code, "E_BIG");
    assert.deepEqual(Object.keys(decoded), ["code"]);
  });

  test("decodeValue() rebuilds an unknown error name as an Error with that name", () => {
    class SqliteError extends Error {
      code = "SQLITE_ERROR";
      constructor(message: string) {
        super(message);
        this.name = "SqliteError";
      }
    }
    const decoded = roundTrip(new SqliteError("no such table")) as Error & {
      code: string;
    };
    assert.equal(Object.getPrototypeOf(decoded), Error.prototype);
    assert.equal(decoded.name, "SqliteError");
    assert.equal(decoded.code, "SQLITE_ERROR");
    assert.equal(String(decoded), "SqliteError: no such table");
  });

  test("decodeValue() rebuilds an AggregateError with its errors", () => {
    const error = new AggregateError([new TypeError("a"), "b"], "both failed");
    const decoded = roundTrip(error) as AggregateError;
    assert.ok(decoded instanceof AggregateError);
    assert.ok(decoded.errors[0] instanceof TypeError);
    assert.equal(decoded.errors[1], "b");
  });

  test("encodeValue() replaces error properties that cannot cross with a placeholder", () => {
    const error = Object.assign(new Error("x"), {
      callback: () => 1,
      symbol: Symbol("s"),
      instance: new (class Foo {})(),
      fine: [1, 2],
    }) as unknown as Error & Record<string, unknown>;
    error.self = error;
    const decoded = roundTrip({ error }) as { error: Record<string, unknown> };
    assert.equal(decoded.error.callback, "[unserializable function]");
    assert.equal(decoded.error.symbol, "[unserializable symbol]");
    assert.equal(decoded.error.instance, "[unserializable instance of Foo]");
    assert.equal(decoded.error.self, "[unserializable circular reference]");
    assert.deepEqual(decoded.error.fine, [1, 2]);
  });

  test("encodeValue() replaces a circular non-error property of an error", () => {
    const loop: Record<string, unknown> = {};
    loop.loop = loop;
    const error = Object.assign(new Error("x"), {
      loop,
      data: new Uint8Array(20),
    });
    const decoded = roundTrip(error, 4) as unknown as Record<string, unknown>;
    assert.equal(decoded.loop, "[unserializable circular reference]");
    assert.equal((decoded.data as Uint8Array).length, 20);
  });

  test("encodeValue() cuts an error cause cycle where it closes", () => {
    const a = new Error("a");
    const b = new Error("b", { cause: a });
    (a as { cause?: unknown }).cause = b;
    const decoded = roundTrip(a) as Error;
    assert.equal((decoded.cause as Error).message, "b");
    assert.equal(Object.hasOwn(decoded.cause as Error, "cause"), false);
    const self = new Error("self");
    (self as { cause?: unknown }).cause = self;
    assert.equal(Object.hasOwn(roundTrip(self) as Error, "cause"), false);
  });

  test("encodeValue() cuts a cause chain after 16 errors", () => {
    let error = new Error("e0");
    for (let i = 1; i < 30; i++) error = new Error(`e${i}`, { cause: error });
    let decoded: unknown = roundTrip(error);
    let count = 0;
    while (decoded instanceof Error) {
      count++;
      decoded = decoded.cause;
    }
    assert.equal(count, 16);
  });

  test("encodeValue() keeps a cause that is not an error, and an undefined cause", () => {
    const decoded = roundTrip(new Error("x", { cause: { code: 1 } })) as Error;
    assert.deepEqual(decoded.cause, { code: 1 });
    const undefinedCause = roundTrip(
      new Error("y", { cause: undefined }),
    ) as Error;
    assert.ok(Object.hasOwn(undefinedCause, "cause"));
  });

  test("decodeValue() rejects an error without a text name and message", () => {
    // 27001 wrapping {"name": 1, "message": "m"}
    assertProtocolError(
      bytes(
        0xd9,
        0x69,
        0x79,
        0xa2,
        0x64,
        0x6e,
        0x61,
        0x6d,
        0x65,
        0x01,
        0x67,
        0x6d,
        0x65,
        0x73,
        0x73,
        0x61,
        0x67,
        0x65,
        0x61,
        0x6d,
      ),
    );
  });
});
