import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import fc from "fast-check";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import {
  ATTACHMENT_THRESHOLD_BYTES,
  encodeValue,
} from "../../src/protocol/encode_value.ts";
import { registerType } from "../../src/protocol/register_type.ts";
import { ProtocolError } from "../../src/errors.ts";
import { concat, difference } from "./_arbitraries.ts";
import { fuzzTargets } from "./_fuzz.ts";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

const Float16 = (globalThis as {
  Float16Array?: new (buffer: ArrayBuffer) => ArrayBufferView;
}).Float16Array;

/** Encodes and decodes a value through a frame-like payload. */
function roundTrip(value: unknown, attachmentThresholdBytes?: number): unknown {
  const encoded = encodeValue(
    value,
    attachmentThresholdBytes === undefined ? {} : { attachmentThresholdBytes },
  );
  const area = concat(encoded.attachments);
  assert.equal(area.byteLength, encoded.attachmentBytes);
  return decodeValue(encoded.head, area);
}

function bytes(...values: number[]): Uint8Array {
  return new Uint8Array(values);
}

function hex(data: Uint8Array): string {
  return Array.from(data, (b) => b.toString(16).padStart(2, "0")).join(" ");
}

function assertSame(actual: unknown, expected: unknown): void {
  const d = difference(actual, expected);
  if (d !== undefined) assert.fail(d);
}

/** Decodes; any failure must be a ProtocolError of the decoder's own. */
function decodeOrProtocolError(head: Uint8Array, area?: Uint8Array): void {
  try {
    decodeValue(head, area);
  } catch (error: unknown) {
    if (!(error instanceof ProtocolError)) throw error;
    // The decoder wraps anything unexpected with a cause: that is a bug.
    assert.equal(error.cause, undefined, error.message);
  }
}

function assertProtocolError(head: Uint8Array, pattern?: RegExp): void {
  assert.throws(() => decodeValue(head), (error: unknown) => {
    assert.ok(error instanceof ProtocolError, String(error));
    assert.equal(error.cause, undefined);
    if (pattern) assert.match(error.message, pattern);
    return true;
  });
}

// ---------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------

const keyArb = fc.oneof(
  fc.string({ maxLength: 10 }),
  fc.constantFrom(
    "__proto__",
    "constructor",
    "toString",
    "errors",
    "line",
    "code",
    "a b",
    "",
  ),
  fc.string({ unit: "grapheme", maxLength: 6 }),
);

const textArb = fc.oneof(
  fc.string({ maxLength: 30 }),
  fc.string({ unit: "grapheme", maxLength: 30 }),
  fc.string({ unit: "binary", maxLength: 40 }).filter((s) =>
    (s as unknown as { isWellFormed(): boolean }).isWellFormed()
  ),
  fc.string({ minLength: 60, maxLength: 300 }),
  fc.constantFrom("\uFEFF", "\uFEFFbom", "é", "€uro", "𝄞", "x".repeat(23)),
);

const numberArb = fc.oneof(
  fc.integer(),
  fc.integer({ min: -30, max: 30 }),
  fc.maxSafeInteger(),
  fc.double(),
  fc.constantFrom(
    -0,
    NaN,
    Infinity,
    -Infinity,
    2 ** 53,
    -(2 ** 53),
    2 ** 53 - 1,
    -(2 ** 53 - 1),
    2 ** 32,
    2 ** 32 - 1,
    -(2 ** 32),
    255,
    256,
    65535,
    65536,
    0.1,
    5e-324,
  ),
);

const bigintArb = fc.oneof(
  fc.bigInt(),
  fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }),
  fc.constantFrom(
    0n,
    -1n,
    2n ** 64n - 1n,
    -(2n ** 64n),
    2n ** 64n,
    2n ** 53n + 1n,
  ),
);

/** A typed array of random kind over random bytes, at a random offset. */
const typedArrayArb = fc.tuple(
  fc.constantFrom(
    "Uint8Array",
    "Uint8ClampedArray",
    "Uint16Array",
    "Uint32Array",
    "BigUint64Array",
    "Int8Array",
    "Int16Array",
    "Int32Array",
    "BigInt64Array",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "DataView",
    "ArrayBuffer",
    "Buffer",
  ),
  fc.nat({ max: 3 }),
  fc.uint8Array({ maxLength: 48 }),
).map(([kind, pad, raw]) => {
  const ctors: Record<
    string,
    | (new (b: ArrayBuffer, o: number, l: number) => ArrayBufferView)
    | undefined
  > = {
    Uint8Array,
    Uint8ClampedArray,
    Uint16Array,
    Uint32Array,
    BigUint64Array,
    Int8Array,
    Int16Array,
    Int32Array,
    BigInt64Array,
    Float16Array: Float16 as
      | (new (b: ArrayBuffer, o: number, l: number) => ArrayBufferView)
      | undefined,
    Float32Array,
    Float64Array,
    DataView,
  };
  if (kind === "ArrayBuffer") return raw.buffer.slice(0);
  if (kind === "Buffer") return Buffer.from(raw);
  const ctor = ctors[kind] ?? Uint8Array;
  const size = (ctor as unknown as { BYTES_PER_ELEMENT?: number })
    .BYTES_PER_ELEMENT ?? 1;
  if (kind === "DataView") {
    const backing = new Uint8Array(pad + raw.length);
    backing.set(raw, pad);
    return new DataView(backing.buffer, pad, raw.length);
  }
  const count = Math.floor(raw.length / size);
  const offset = pad * size;
  const backing = new Uint8Array(offset + count * size + size);
  backing.set(raw.subarray(0, count * size), offset);
  return new ctor(backing.buffer, offset, count);
});

const leafArb: fc.Arbitrary<unknown> = fc.oneof(
  numberArb,
  bigintArb,
  textArb,
  fc.constantFrom(true, false, null, undefined),
  fc.date({ noInvalidDate: false }),
  fc.integer({ min: -8.64e15, max: 8.64e15 }).map((ms) => new Date(ms)),
  fc.constantFrom(/a+b/, /x/giu, new RegExp(""), /[\u{1F600}]/v, /^$/m),
  fc.webUrl().map((href) => new URL(href)),
  typedArrayArb,
);

const errorClassArb = fc.constantFrom(
  "Error",
  "TypeError",
  "RangeError",
  "SyntaxError",
  "ReferenceError",
  "EvalError",
  "URIError",
  "AggregateError",
  "SqliteError",
);

function makeError(
  kind: string,
  message: string,
  props: Record<string, unknown>,
  cause: { has: boolean; value: unknown },
  stack: string | undefined,
): Error {
  const options = cause.has ? { cause: cause.value } : undefined;
  let error: Error;
  switch (kind) {
    case "AggregateError":
      error = new AggregateError([new Error("inner"), 1], message, options);
      break;
    case "SqliteError":
      error = new Error(message, options);
      error.name = "SqliteError";
      break;
    default: {
      const ctor = (globalThis as unknown as Record<string, ErrorConstructor>)[
        kind
      ]!;
      error = new ctor(message, options);
    }
  }
  if (stack === undefined) {
    Object.defineProperty(error, "stack", {
      value: undefined,
      writable: true,
      configurable: true,
    });
  } else if (stack !== "native") {
    Object.defineProperty(error, "stack", {
      value: stack,
      writable: true,
      configurable: true,
    });
  }
  for (const [k, v] of Object.entries(props)) {
    if (
      k === "name" || k === "message" || k === "stack" || k === "cause" ||
      (k === "errors" && error instanceof AggregateError) ||
      // Inherited methods are left out on the way back (buildError).
      typeof (error as unknown as Record<string, unknown>)[k] === "function"
    ) {
      continue;
    }
    Object.defineProperty(error, k, {
      value: v,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  return error;
}

const { value: valueArb } = fc.letrec<{ value: unknown; error: Error }>(
  (tie) => ({
    value: fc.oneof(
      { depthSize: "small", withCrossShrink: true },
      leafArb,
      fc.array(tie("value"), { maxLength: 5 }),
      fc.sparseArray(tie("value"), { maxLength: 6 }),
      fc.dictionary(keyArb, tie("value"), { maxKeys: 5 }),
      fc.map(tie("value"), tie("value"), { maxKeys: 4 }),
      fc.set(tie("value"), { maxLength: 4 }),
      tie("error"),
    ),
    error: fc.tuple(
      errorClassArb,
      textArb,
      fc.dictionary(keyArb, tie("value"), { maxKeys: 3 }),
      fc.oneof(
        fc.constant({ has: false, value: undefined as unknown }),
        tie("value").map((value) => ({ has: true, value })),
      ),
      fc.oneof(fc.constant(undefined), fc.constant("native"), textArb),
    ).map(([kind, message, props, cause, stack]) =>
      makeError(kind, message, props, cause, stack)
    ),
  }),
);

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

// ---------------------------------------------------------------------------
// What cannot cross
// ---------------------------------------------------------------------------

describe("encodeValue() refusals", () => {
  function refusal(value: unknown): string {
    try {
      encodeValue(value, { direction: "to-worker" });
    } catch (error: unknown) {
      assert.ok(error instanceof TypeError, String(error));
      return error.message;
    }
    return assert.fail("encodeValue() did not throw");
  }

  test("encodeValue() names the path of a function", () => {
    const message = {
      type: "call",
      id: 3,
      op: "query",
      args: [1, { onDone() {} }],
    };
    assert.equal(
      refusal(message),
      "Cannot send args[1].onDone: a function cannot cross to the worker",
    );
  });

  test("encodeValue() names the direction the value was going", () => {
    const fn = () => 1;
    const message = (direction?: "to-worker" | "to-parent"): string => {
      try {
        encodeValue({ value: { fn } }, { direction });
      } catch (error: unknown) {
        assert.ok(error instanceof TypeError, String(error));
        return error.message;
      }
      return assert.fail("encodeValue() did not throw");
    };
    assert.equal(
      message("to-parent"),
      "Cannot send value.fn: a function cannot cross from the worker to the parent",
    );
    assert.equal(
      message("to-worker"),
      "Cannot send value.fn: a function cannot cross to the worker",
    );
    assert.equal(
      message(undefined),
      "Cannot send value.fn: a function cannot cross to another process",
    );
  });

  test("encodeValue() names the path of a class instance", () => {
    class Foo {}
    assert.equal(
      refusal({ args: [new Foo()] }),
      "Cannot send args[0]: an instance of Foo cannot cross to the worker; send a plain object instead",
    );
  });

  test("encodeValue() names the path of a circular reference and its target", () => {
    const row: Record<string, unknown> = { id: 1, children: [] };
    (row.children as unknown[]).push({ parent: row });
    assert.equal(
      refusal({ args: [row] }),
      "Cannot send args[0].children[0].parent: a circular reference cannot cross to the worker (it refers back to args[0])",
    );
    const root: Record<string, unknown> = {};
    root.self = root;
    assert.equal(
      refusal(root),
      "Cannot send self: a circular reference cannot cross to the worker (it refers back to the value itself)",
    );
  });

  test("encodeValue() names keys that are not identifiers, map entries and set items", () => {
    assert.equal(
      refusal({ "weird key": Symbol("s") }),
      'Cannot send ["weird key"]: a symbol cannot cross to the worker',
    );
    assert.equal(
      refusal({ tags: new Map<unknown, unknown>([["a", 1], ["b", () => 2]]) }),
      'Cannot send tags.get("b"): a function cannot cross to the worker',
    );
    assert.equal(
      refusal({ tags: new Map([[Symbol("k"), 1]]) }),
      "Cannot send tags.keys()[0]: a symbol cannot cross to the worker",
    );
    assert.equal(
      refusal({ ids: new Set([1, Promise.resolve()]) }),
      "Cannot send ids.values()[1]: a promise cannot cross to the worker",
    );
    assert.equal(
      refusal(() => 1),
      "Cannot send value: a function cannot cross to the worker",
    );
  });

  test("encodeValue() refuses weak collections, boxed primitives and promises", () => {
    assert.match(refusal({ a: new WeakMap() }), /^Cannot send a: a WeakMap /);
    assert.match(refusal({ a: new WeakSet() }), /^Cannot send a: a WeakSet /);
    assert.match(refusal({ a: new WeakRef({}) }), /^Cannot send a: a WeakRef /);
    assert.match(refusal({ a: new Number(1) }), /a boxed Number/);
    assert.match(refusal({ a: Object(1n) }), /a boxed BigInt/);
    assert.match(
      refusal([Promise.resolve(1)]),
      /^Cannot send \[0\]: a promise/,
    );
    assert.match(
      refusal({ a: Object.create({ custom: true }) }),
      /^Cannot send a: an object with a custom prototype cannot cross/,
    );
  });

  test("encodeValue() accepts 512 levels of nesting and refuses 513", () => {
    let ok: unknown = 1;
    for (let i = 0; i < 512; i++) ok = [ok];
    assertSame(roundTrip(ok), ok);
    assert.match(
      refusal([ok]),
      /^Cannot send (\[0\])+…?: a value nested deeper than 512 levels cannot cross/,
    );
  });

  test("encodeValue() refuses a detached ArrayBuffer", () => {
    const buffer = new ArrayBuffer(8);
    const view = new Uint16Array(buffer);
    structuredClone(buffer, { transfer: [buffer] });
    assert.match(
      refusal({ data: buffer }),
      /^Cannot send data: a detached ArrayBuffer cannot cross/,
    );
    assert.match(
      refusal({ data: [view] }),
      /^Cannot send data\[0\]: a detached ArrayBuffer cannot cross/,
    );
  });

  test("encodeValue() keeps the start of a long path", () => {
    let deep: unknown = {
      "a key that is far too long to show in a message": () => 1,
    };
    for (let i = 0; i < 100; i++) deep = { level: [deep] };
    const message = refusal(deep);
    assert.ok(message.startsWith("Cannot send level[0].level[0].level[0]"));
    assert.ok(message.includes("…: a function cannot cross"));
  });

  test("encodeValue() lets a getter encode another value meanwhile", () => {
    const value = {
      get inner() {
        return encodeValue({ nested: "x".repeat(100) }).head.length;
      },
      after: "kept",
    };
    assertSame(roundTrip(value), { inner: 110, after: "kept" });
  });
});

// ---------------------------------------------------------------------------
// Malformed input
// ---------------------------------------------------------------------------

describe("decodeValue() malformed input", () => {
  test("decodeValue() rejects each kind of malformed input with a ProtocolError", () => {
    const cases: [number[], RegExp][] = [
      [[], /ends/],
      [[0x18], /ends/],
      [[0x62, 0x61], /length/],
      [[0x82, 0x01], /exceeds/],
      [[0x82, 0x01, 0x18], /ends/],
      [[0x01, 0x02], /1 bytes follow/],
      [[0x9f, 0xff], /indefinite/],
      [[0x5f, 0xff], /indefinite/],
      [[0xff], /break/],
      [[0x1c], /reserved/],
      [[0x3d], /reserved/],
      [[0xfc], /reserved/],
      [[0xf0], /simple value/],
      [[0xf8, 0x20], /simple value/],
      [[0x62, 0xc3, 0x28], /UTF-8/],
      [[0x78, 0x19, ...new Array(24).fill(0x61), 0xff], /UTF-8/],
      [[0xa1, 0x01, 0x02], /not a text string/],
      [[0xc0, 0x60], /unknown tag 0/],
      [[0xd8, 0x40, 0x40], /unknown tag 64/],
      [[0xdb, 0, 0, 0, 1, 0, 0, 0, 0, 0x40], /unknown tag 4294967296/],
      [[0xdb, 0, 0, 0, 0, 0, 0, 0x69, 0x78, 0x40], /attachment/],
      [[0xc1, 0x60], /date/],
      [[0xc1, 0xc1, 0x00], /date/],
      [[0xc2, 0x01], /bignum/],
      [[0xd8, 0x20, 0x01], /URL/],
      [[0xd8, 0x20, 0x63, 0x3a, 0x2f, 0x2f], /URL/],
      [[0xd8, 0x23, 0x61, 0x28], /RegExp/],
      [[0xd8, 0x23, 0x82, 0x61, 0x61, 0x61, 0x51], /RegExp/],
      [[0xd8, 0x23, 0x81, 0x61, 0x61], /RegExp/],
      [[0xd9, 0x01, 0x02, 0xa0], /Set/],
      [[0xd9, 0x01, 0x03, 0x80], /Map/],
      [[0xd8, 0x45, 0x43, 0x01, 0x02, 0x03], /multiple of 2/],
      [[0xd8, 0x56, 0x44, 0, 0, 0, 0], /multiple of 8/],
      [[0xd8, 0x46, 0x01], /binary tag/],
      [[0xd9, 0x69, 0x78, 0x82, 0x00, 0x01], /attachment/],
      [[0xd9, 0x69, 0x78, 0x83, 0x00, 0x00, 0x00], /attachment/],
      [[0xd9, 0x69, 0x78, 0x82, 0x20, 0x00], /attachment/],
      [[
        0xd9,
        0x69,
        0x78,
        0x82,
        0x1b,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0xff,
        0x00,
      ], /attachment/],
      [[0xd9, 0x69, 0x79, 0xa0], /name and message/],
      [[0xd9, 0x69, 0x79, 0x80], /error/],
    ];
    for (const [input, pattern] of cases) {
      assert.throws(
        () => decodeValue(new Uint8Array(input)),
        (error: unknown) => {
          assert.ok(
            error instanceof ProtocolError,
            `${hex(bytes(...input))}: ${String(error)}`,
          );
          assert.equal(error.cause, undefined);
          assert.match(error.message, pattern, hex(bytes(...input)));
          return true;
        },
      );
    }
  });

  test("decodeValue() fails at once on a huge claimed length, without allocating", () => {
    const claims = [
      [0x9b, 0, 0, 0, 1, 0, 0, 0, 0, 0x00],
      [0x9a, 0xff, 0xff, 0xff, 0xff, 0x00],
      [0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x00],
      [0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
      [0x7a, 0xff, 0xff, 0xff, 0xff, 0x61],
      [0xd9, 0x01, 0x02, 0x9a, 0xff, 0xff, 0xff, 0xff, 0x00],
      [0xd9, 0x01, 0x03, 0xba, 0x7f, 0xff, 0xff, 0xff, 0x00, 0x00],
      [0xd9, 0x69, 0x79, 0xba, 0x7f, 0xff, 0xff, 0xff, 0x00, 0x00],
      [0xd8, 0x56, 0x5b, 0, 0, 0, 1, 0, 0, 0, 0],
      [0x82, 0x9b, 0, 0x20, 0, 0, 0, 0, 0, 0],
    ];
    const start = performance.now();
    for (const claim of claims) {
      assertProtocolError(new Uint8Array(claim), /exceeds/);
    }
    assert.ok(performance.now() - start < 500);
  });

  test("decodeValue() rejects nesting deeper than 512 levels", () => {
    const ok = new Uint8Array(513).fill(0x81);
    ok[512] = 0x00;
    decodeValue(ok);
    const deep = new Uint8Array(514).fill(0x81);
    deep[513] = 0x00;
    assertProtocolError(deep, /nesting deeper than 512/);
    const deepMaps = new Uint8Array(100_001).fill(0xa1);
    assertProtocolError(deepMaps, /not a text string|nesting/);
    const objects: number[] = [];
    for (let i = 0; i < 600; i++) objects.push(0xa1, 0x61, 0x61);
    objects.push(0x00);
    assertProtocolError(new Uint8Array(objects), /nesting deeper than 512/);
    const sets: number[] = [];
    for (let i = 0; i < 600; i++) sets.push(0xd9, 0x01, 0x02, 0x81);
    sets.push(0x00);
    assertProtocolError(new Uint8Array(sets), /nesting deeper than 512/);
  });

  test("decodeValue() rejects a long run of tags without overflowing the stack", () => {
    assertProtocolError(new Uint8Array(200_000).fill(0xc1));
    assertProtocolError(new Uint8Array(200_000).fill(0xc2));
    const urls = new Uint8Array(200_000);
    for (let i = 0; i < urls.length; i += 2) urls.set([0xd8, 0x20], i);
    assertProtocolError(urls);
  });

  test("decodeValue() only ever throws ProtocolError on random bytes", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 48 }),
        fc.uint8Array({ maxLength: 16 }),
        (head, area) => decodeOrProtocolError(head, area),
      ),
      { numRuns: 3000 },
    );
  });

  test("decodeValue() only ever throws ProtocolError on mutated valid encodings", () => {
    const mutation = fc.oneof(
      fc.record({
        kind: fc.constant("set" as const),
        at: fc.nat(),
        byte: fc.oneof(
          fc.nat({ max: 255 }),
          fc.constantFrom(
            0x1b,
            0x1f,
            0x5f,
            0x7f,
            0x9f,
            0xbf,
            0xdb,
            0xf9,
            0xfb,
            0xff,
            0x1c,
          ),
        ),
      }),
      fc.record({ kind: fc.constant("cut" as const), at: fc.nat() }),
      fc.record({
        kind: fc.constant("insert" as const),
        at: fc.nat(),
        byte: fc.nat({ max: 255 }),
      }),
    );
    fc.assert(
      fc.property(
        valueArb,
        fc.array(mutation, { minLength: 1, maxLength: 4 }),
        fc.nat({ max: 16 }),
        (value, mutations, threshold) => {
          const encoded = encodeValue(value, {
            attachmentThresholdBytes: threshold,
          });
          let head = encoded.head;
          for (const m of mutations) {
            const at = head.length === 0 ? 0 : m.at % head.length;
            if (m.kind === "set") {
              head = head.slice();
              head[at] = m.byte;
            } else if (m.kind === "cut") {
              head = head.slice(0, at);
            } else {
              const next = new Uint8Array(head.length + 1);
              next.set(head.subarray(0, at));
              next[at] = m.byte;
              next.set(head.subarray(at), at + 1);
              head = next;
            }
          }
          const area = concat(encoded.attachments);
          decodeOrProtocolError(head, area);
          decodeOrProtocolError(head, area.subarray(1));
        },
      ),
      { numRuns: 2500 },
    );
  });
});

describe("encodeValue() plain objects", () => {
  test("encodeValue() sends only own keys while Object.prototype has an enumerable property", () => {
    const proto = Object.prototype as Record<string, unknown>;
    proto.polluted = "inherited";
    try {
      const decoded = roundTrip({ a: 1, b: { c: 2 } });
      assertSame(decoded, { a: 1, b: { c: 2 } });
    } finally {
      delete proto.polluted;
    }
  });

  test("encodeValue() writes a valid head when a getter deletes a key not yet sent", () => {
    const value: Record<string, unknown> = {
      get a() {
        delete value.b;
        return 1;
      },
      b: 2,
      c: 3,
    };
    const decoded = roundTrip(value) as Record<string, unknown>;
    assert.deepEqual(Object.keys(decoded), ["a", "c"]);
    assert.equal(decoded.a, 1);
    assert.equal(decoded.c, 3);
  });

  test("encodeValue() writes objects of 23, 24 and 300 keys in order", () => {
    for (const n of [23, 24, 300]) {
      const value: Record<string, unknown> = Object.fromEntries(
        Array.from({ length: n }, (_, i) => [`k${n - i}`, i]),
      );
      value["7"] = "index keys come first";
      assertSame(roundTrip(value), value);
    }
  });
});

describe("decodeValue() objects of a repeated shape", () => {
  test("decodeValue() builds rows of the same keys exactly, across decodes and after a key differs", () => {
    // 40 rows of one shape first: a shape is compiled after 16 sightings.
    const same = Array.from({ length: 40 }, (_, i) => ({
      id: -i,
      name: `s${i}`,
      tags: [i],
    }));
    const rows = [
      ...same,
      { id: 1, name: "a", tags: ["x"] },
      { id: 2, name: "b", tags: [] },
      { id: 3, other: "c", tags: [] },
      { id: 4, name: "d" },
      { id: 5, name: "e", tags: [], extra: { id: 6, name: "f", tags: null } },
      { id: 7, name: "g", tags: [{ id: 8, name: "h", tags: [] }] },
      { name: "i", id: 9, tags: [] },
    ];
    for (let round = 0; round < 3; round++) {
      assertSame(roundTrip(rows), rows);
    }
  });

  test("decodeValue() gives back rows of a few shapes with any values exactly", () => {
    const keySetArb = fc.uniqueArray(keyArb, { minLength: 1, maxLength: 6 });
    fc.assert(
      fc.property(
        fc.array(keySetArb, { minLength: 1, maxLength: 3 }),
        fc.array(fc.tuple(fc.nat(), valueArb, fc.boolean()), {
          minLength: 16,
          maxLength: 40,
        }),
        (keySets, cells) => {
          const rows = cells.map(([pick, value, reverse]) => {
            const keys = keySets[pick % keySets.length]!;
            const row: Record<string, unknown> = {};
            for (const key of reverse ? [...keys].reverse() : keys) {
              Object.defineProperty(row, key, {
                value,
                writable: true,
                enumerable: true,
                configurable: true,
              });
            }
            return row;
          });
          for (let round = 0; round < 2; round++) {
            assertSame(roundTrip(rows), rows);
          }
        },
      ),
      { numRuns: 40 },
    );
  });

  test("decodeValue() keeps keys a literal cannot hold, and inherited names, as own properties", () => {
    const special = JSON.parse(
      '{"__proto__": 1, "constructor": 2, "toString": 3, "a b": 4, "0": 5}',
    );
    const inherited = Array.from({ length: 20 }, (_, i) => ({
      constructor: i,
      toString: 2,
      valueOf: 3,
      __defineGetter__: 4,
    }));
    const rows = [...inherited, special, ...inherited, special];
    for (let round = 0; round < 2; round++) {
      const decoded = roundTrip(rows) as Record<string, unknown>[];
      assertSame(decoded, rows);
      for (const row of decoded) {
        assert.equal(Object.getPrototypeOf(row), Object.prototype);
        assert.ok(Object.hasOwn(row, "constructor"));
        assert.ok(Object.hasOwn(row, "toString"));
      }
      assert.ok(Object.hasOwn(decoded[20]!, "__proto__"));
    }
    assert.equal(({} as { polluted?: unknown }).polluted, undefined);
  });

  test("decodeValue() decodes thousands of distinct shapes in one value", () => {
    const rows = Array.from({ length: 5000 }, (_, i) => ({
      [`k${i}`]: i,
      [`j${i}`]: -i,
    }));
    assertSame(roundTrip(rows), rows);
  });

  test("decodeValue() lets a custom type's decode decode a value of its own mid-object", () => {
    // The inner value travels as CBOR bytes, decoded by the type's decode
    // while the row around it is half built.
    class Nested {
      constructor(readonly rows: { id: number; name: string }[]) {}
    }
    registerType<Nested, Uint8Array>({
      name: "codec_test.Nested",
      is: (value) => value instanceof Nested,
      encode: (nested) => encodeValue(nested.rows).head,
      decode: (head) =>
        new Nested(decodeValue(head) as { id: number; name: string }[]),
    });
    const rows = Array.from({ length: 20 }, (_, i) => ({
      id: i,
      nested: new Nested([{ id: i, name: "n" }, { id: -i, name: "m" }]),
      name: `r${i}`,
    }));
    for (let round = 0; round < 2; round++) {
      const decoded = roundTrip(rows) as typeof rows;
      assert.deepEqual(
        decoded.map((r) => [r.id, r.name, r.nested.rows]),
        rows.map((r) => [r.id, r.name, r.nested.rows]),
      );
      assert.ok(decoded.every((r) => r.nested instanceof Nested));
    }
  });

  test("decodeValue() refuses a truncated row of a known shape", () => {
    const rows = Array.from({ length: 20 }, (_, i) => ({ alpha: i, beta: 2 }));
    const { head } = encodeValue(rows);
    decodeValue(head);
    for (let cut = 1; cut < head.byteLength; cut++) {
      assertProtocolError(head.subarray(0, cut));
    }
  });
});

describe("value decoder fuzz (CI size; deno task fuzz runs 100,000 cases)", () => {
  for (const target of fuzzTargets()) {
    if (!target.name.startsWith("value decoder")) continue;
    test(`fuzz: ${target.name}`, () => {
      fc.assert(target.property, { numRuns: 300 * target.weight });
    });
  }
});
