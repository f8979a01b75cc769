/**
 * Helpers and rich value arbitraries for the codec's own tests
 * (codec_test.ts, encode_value_test.ts, decode_value_test.ts): round trips,
 * exact comparison, and values covering every edge the codec handles
 * (Node Buffers, number and bigint limits, stack variants, typed arrays at
 * odd offsets). The frame and message tests and the fuzz targets use the
 * lighter arbitraries of _arbitraries.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import fc from "fast-check";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import { encodeValue } from "../../src/protocol/encode_value.ts";
import { ProtocolError } from "../../src/errors.ts";
import { concat, difference } from "./_arbitraries.ts";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

export const Float16 = (globalThis as {
  Float16Array?: new (buffer: ArrayBuffer) => ArrayBufferView;
}).Float16Array;

/** Encodes and decodes a value through a frame-like payload. */
export function roundTrip(
  value: unknown,
  attachmentThresholdBytes?: number,
): unknown {
  const encoded = encodeValue(
    value,
    attachmentThresholdBytes === undefined ? {} : { attachmentThresholdBytes },
  );
  const area = concat(encoded.attachments);
  assert.equal(area.byteLength, encoded.attachmentBytes);
  return decodeValue(encoded.head, area);
}

export function bytes(...values: number[]): Uint8Array {
  return new Uint8Array(values);
}

export function hex(data: Uint8Array): string {
  return Array.from(data, (b) => b.toString(16).padStart(2, "0")).join(" ");
}

export function assertSame(actual: unknown, expected: unknown): void {
  const d = difference(actual, expected);
  if (d !== undefined) assert.fail(d);
}

/** Decodes; any failure must be a ProtocolError of the decoder's own. */
export function decodeOrProtocolError(
  head: Uint8Array,
  area?: Uint8Array,
): void {
  try {
    decodeValue(head, area);
  } catch (error: unknown) {
    if (!(error instanceof ProtocolError)) throw error;
    // The decoder wraps anything unexpected with a cause: that is a bug.
    assert.equal(error.cause, undefined, error.message);
  }
}

export function assertProtocolError(head: Uint8Array, pattern?: RegExp): void {
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

export const keyArb = fc.oneof(
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

export const textArb = fc.oneof(
  fc.string({ maxLength: 30 }),
  fc.string({ unit: "grapheme", maxLength: 30 }),
  fc.string({ unit: "binary", maxLength: 40 }).filter((s) =>
    (s as unknown as { isWellFormed(): boolean }).isWellFormed()
  ),
  fc.string({ minLength: 60, maxLength: 300 }),
  fc.constantFrom("\uFEFF", "\uFEFFbom", "é", "€uro", "𝄞", "x".repeat(23)),
);

export const numberArb = fc.oneof(
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

export const bigintArb = fc.oneof(
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
export const typedArrayArb = fc.tuple(
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

export const leafArb: fc.Arbitrary<unknown> = fc.oneof(
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

export const errorClassArb = fc.constantFrom(
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

export function makeError(
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

export const { value: richValueArb } = fc.letrec<
  { value: unknown; error: Error }
>(
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
