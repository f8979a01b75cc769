/**
 * fast-check arbitraries for every value the codec carries and every
 * message of the protocol, an exact structural comparison, and helpers to
 * build frame streams. Shared by the frame and message tests and by
 * scripts/fuzz.ts.
 *
 * @module
 */

import fc from "fast-check";
import { FRAME_MAGIC } from "../../src/protocol/frame_header.ts";
import type { Message } from "../../src/protocol/messages.ts";
import { encodeMessage } from "../../src/protocol/encode_message.ts";

const Float16 = (globalThis as {
  Float16Array?: new (
    buffer: ArrayBuffer,
    o: number,
    l: number,
  ) => ArrayBufferView;
}).Float16Array;

const keyArb = fc.oneof(
  fc.string({ maxLength: 8 }),
  fc.constantFrom(
    "__proto__",
    "constructor",
    "toString",
    "valueOf",
    "type",
    "id",
    "code",
    "",
  ),
  fc.string({ unit: "grapheme", maxLength: 5 }),
);

const textArb = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.string({ unit: "grapheme", maxLength: 20 }),
  fc.string({ minLength: 24, maxLength: 200 }),
  fc.constantFrom("\uFEFF", "é", "€uro", "𝄞", "\u0000", "\x89ALK"),
);

const numberArb = fc.oneof(
  fc.integer(),
  fc.maxSafeInteger(),
  fc.double(),
  fc.constantFrom(
    -0,
    NaN,
    Infinity,
    -Infinity,
    2 ** 53 - 1,
    -(2 ** 53 - 1),
    2 ** 32,
    0xffffffff,
    65536,
    0.1,
    5e-324,
  ),
);

const bigintArb = fc.oneof(
  fc.bigInt(),
  fc.constantFrom(0n, -1n, 2n ** 64n - 1n, -(2n ** 64n), 2n ** 70n),
);

const TYPED = [
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
] as const;

type ViewConstructor = new (
  buffer: ArrayBuffer,
  offset: number,
  length: number,
) => ArrayBufferView;

/** A binary value of any supported kind, over random bytes at a random offset. */
export const binaryArb: fc.Arbitrary<ArrayBufferView | ArrayBuffer> = fc.tuple(
  fc.constantFrom(...TYPED),
  fc.nat({ max: 3 }),
  fc.uint8Array({ maxLength: 40 }),
).map(([kind, pad, raw]) => {
  if (kind === "ArrayBuffer") return raw.slice().buffer;
  const ctors: Record<string, ViewConstructor | undefined> = {
    Uint8Array,
    Uint8ClampedArray,
    Uint16Array,
    Uint32Array,
    BigUint64Array,
    Int8Array,
    Int16Array,
    Int32Array,
    BigInt64Array,
    Float16Array: Float16,
    Float32Array,
    Float64Array,
  };
  if (kind === "DataView") {
    const backing = new Uint8Array(pad + raw.length);
    backing.set(raw, pad);
    return new DataView(backing.buffer, pad, raw.length);
  }
  const ctor = ctors[kind] ?? Uint8Array;
  const size = (ctor as unknown as { BYTES_PER_ELEMENT: number })
    .BYTES_PER_ELEMENT;
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
  fc.constantFrom(/a+b/, /x/giu, new RegExp(""), /^$/m),
  fc.webUrl().map((href) => new URL(href)),
  binaryArb,
);

const ERROR_KINDS = [
  "Error",
  "TypeError",
  "RangeError",
  "SyntaxError",
  "ReferenceError",
  "EvalError",
  "URIError",
  "AggregateError",
  "CustomError",
] as const;

function makeError(
  kind: (typeof ERROR_KINDS)[number],
  message: string,
  props: Record<string, unknown>,
  cause: { has: boolean; value: unknown },
): Error {
  const options = cause.has ? { cause: cause.value } : undefined;
  let error: Error;
  if (kind === "AggregateError") {
    error = new AggregateError([new Error("inner")], message, options);
  } else if (kind === "CustomError") {
    error = new Error(message, options);
    error.name = "CustomError";
  } else {
    const ctor = (globalThis as unknown as Record<string, ErrorConstructor>)[
      kind
    ] ?? Error;
    error = new ctor(message, options);
  }
  for (const [key, value] of Object.entries(props)) {
    if (["name", "message", "stack", "cause", "errors"].includes(key)) continue;
    // Names of inherited methods are left out on the way back (an own
    // `toString` string would make the error unprintable).
    if (
      typeof (error as unknown as Record<string, unknown>)[key] === "function"
    ) {
      continue;
    }
    Object.defineProperty(error, key, {
      value,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  return error;
}

const tree = fc.letrec<{ value: unknown; error: Error }>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    leafArb,
    fc.array(tie("value"), { maxLength: 4 }),
    fc.sparseArray(tie("value"), { maxLength: 5 }),
    fc.dictionary(keyArb, tie("value"), { maxKeys: 4 }),
    fc.map(tie("value"), tie("value"), { maxKeys: 3 }),
    fc.set(tie("value"), { maxLength: 3 }),
    tie("error"),
  ),
  error: fc.tuple(
    fc.constantFrom(...ERROR_KINDS),
    textArb,
    fc.dictionary(keyArb, tie("value"), { maxKeys: 2 }),
    fc.oneof(
      fc.constant({ has: false, value: undefined as unknown }),
      tie("value").map((value) => ({ has: true, value })),
    ),
  ).map(([kind, message, props, cause]) =>
    makeError(kind, message, props, cause)
  ),
}));

/** Any value the codec carries. */
export const valueArb: fc.Arbitrary<unknown> = tree.value;

/** An error value, as handlers throw them. */
export const errorArb: fc.Arbitrary<Error> = tree.error;

const callIdArb = fc.oneof(
  fc.integer({ min: 1, max: 1000 }),
  fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }),
);

const opArb = fc.oneof(
  fc.constantFrom("query", "ingest", "then", "x"),
  fc.string({ minLength: 1, maxLength: 12 }),
);

/**
 * Any message of the protocol, built with its keys in the order
 * `decodeMessage` returns them, so a round trip compares exactly.
 */
export const messageArb: fc.Arbitrary<Message> = fc.oneof(
  fc.record({
    id: callIdArb,
    op: opArb,
    args: fc.array(valueArb, { maxLength: 4 }),
  }).map(({ id, op, args }): Message => ({ type: "call", id, op, args })),
  fc.record({ id: callIdArb, value: valueArb }).map((
    { id, value },
  ): Message => ({ type: "result", id, value })),
  fc.record({ id: callIdArb, error: fc.oneof(errorArb, valueArb) }).map((
    { id, error },
  ): Message => ({ type: "error", id, error })),
  callIdArb.map((id): Message => ({ type: "cancel", id })),
  fc.record({
    id: callIdArb,
    op: opArb,
    args: fc.array(valueArb, { maxLength: 2 }),
    windowItems: fc.integer({ min: 1, max: 1 << 20 }),
    windowBytes: fc.integer({ min: 1, max: 2 ** 40 }),
  }).map((call): Message => ({ type: "call", ...call })),
  fc.record({
    id: callIdArb,
    values: fc.array(valueArb, { minLength: 1, maxLength: 4 }),
  }).map(({ id, values }): Message => ({ type: "items", id, values })),
  callIdArb.map((id): Message => ({ type: "end", id })),
  fc.record({ id: callIdArb, items: fc.nat(), bytes: fc.nat() }).map((
    { id, items, bytes },
  ): Message => ({ type: "credit", id, items, bytes })),
  fc.record({ id: callIdArb, value: valueArb }).map((
    { id, value },
  ): Message => ({ type: "progress", id, value })),
  fc.record({
    version: fc.constantFrom(1, 2),
    pid: fc.nat(),
    ops: fc.array(opArb, { maxLength: 5 }),
    runtime: fc.constantFrom("deno 2.9.6", "bun 1.4.5", "python 3.11.7"),
    concurrency: fc.integer({ min: 1, max: 64 }),
    idempotent: fc.array(opArb, { maxLength: 3 }),
  }).map((hello): Message => ({
    type: "hello",
    id: 0,
    version: hello.version,
    pid: hello.pid,
    ops: hello.ops,
    runtime: hello.runtime,
    concurrency: hello.concurrency,
    idempotent: hello.idempotent,
  })),
  fc.record({
    phase: fc.constantFrom("import" as const, "definition" as const),
    error: errorArb,
  }).map(({ phase, error }): Message => ({
    type: "fatal",
    id: 0,
    phase,
    error,
  })),
  fc.constant<Message>({ type: "shutdown", id: 0 }),
  fc.constant<Message>({ type: "shutdown-ack", id: 0 }),
);

/**
 * Encodes a message into one frame's bytes. With a threshold, binary values
 * at least that large travel as attachments.
 *
 * @param message The message.
 * @param attachmentThresholdBytes Smallest binary value sent as an attachment.
 * @returns The frame.
 */
export function frameBytes(
  message: Message,
  attachmentThresholdBytes?: number,
): Uint8Array {
  return concat(encodeMessage(message, { attachmentThresholdBytes }));
}

/**
 * Joins byte arrays.
 *
 * @param chunks The arrays.
 * @returns One array.
 */
export function concat(chunks: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return out;
}

/**
 * Cuts a stream at the given points (any numbers; taken modulo its length).
 *
 * @param data The stream.
 * @param cuts Cut points.
 * @returns The pieces, in order, covering the stream.
 */
export function split(data: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const points = [...new Set(cuts.map((cut) => cut % (data.byteLength + 1)))]
    .sort((a, b) => a - b);
  const pieces: Uint8Array[] = [];
  let start = 0;
  for (const point of points) {
    pieces.push(data.subarray(start, point));
    start = point;
  }
  pieces.push(data.subarray(start));
  return pieces;
}

/**
 * Random bytes that never contain the whole frame magic (stray output).
 */
export const noiseArb: fc.Arbitrary<Uint8Array> = fc.oneof(
  fc.uint8Array({ maxLength: 40 }),
  fc.string({ maxLength: 40 }).map((text) => new TextEncoder().encode(text)),
  fc.constantFrom(
    new Uint8Array([0x89]),
    new Uint8Array([0x89, 0x41]),
    new Uint8Array([0x89, 0x41, 0x4c]),
    new Uint8Array([0x41, 0x4c, 0x4b]),
  ),
).map(defuse);

/**
 * Breaks every whole frame magic in `bytes` (so it is plain stray output).
 *
 * @param bytes The bytes (copied).
 * @returns Bytes without the magic.
 */
export function defuse(bytes: Uint8Array): Uint8Array {
  const out = bytes.slice();
  for (let i = 0; i + 3 < out.length; i++) {
    if (
      out[i] === FRAME_MAGIC[0] && out[i + 1] === FRAME_MAGIC[1] &&
      out[i + 2] === FRAME_MAGIC[2] && out[i + 3] === FRAME_MAGIC[3]
    ) {
      out[i + 3] = 0;
    }
  }
  return out;
}

/**
 * A frame header with arbitrary fields: magic, then version, reserved
 * bytes, payload length and head length as given.
 *
 * @param fields The header's fields.
 * @returns 16 bytes.
 */
export function header(fields: {
  version: number;
  reserved: number;
  payload: number;
  head: number;
}): Uint8Array {
  const bytes = new Uint8Array(16);
  bytes.set(FRAME_MAGIC, 0);
  bytes[4] = fields.version;
  bytes[5] = fields.reserved & 0xff;
  bytes[6] = (fields.reserved >> 8) & 0xff;
  bytes[7] = (fields.reserved >> 16) & 0xff;
  const view = new DataView(bytes.buffer);
  view.setUint32(8, fields.payload >>> 0);
  view.setUint32(12, fields.head >>> 0);
  return bytes;
}

/** Headers a hostile writer might send: huge lengths, bad versions, lies. */
export const hostileHeaderArb: fc.Arbitrary<Uint8Array> = fc.record({
  version: fc.oneof(fc.constant(1), fc.nat({ max: 255 })),
  reserved: fc.oneof(fc.constant(0), fc.nat({ max: 0xffffff })),
  payload: fc.oneof(
    fc.constantFrom(0, 1, 0xffffffff, 0x80000000, 0x10000000, 0x10000001),
    fc.nat({ max: 0xffffffff }),
    fc.nat({ max: 200 }),
  ),
  head: fc.oneof(
    fc.constantFrom(0, 0xffffffff),
    fc.nat({ max: 0xffffffff }),
    fc.nat({ max: 200 }),
  ),
}).map(header);

/** Bytes to mutate a stream with. */
export type Mutation =
  | { kind: "set"; at: number; byte: number }
  | { kind: "cut"; at: number }
  | { kind: "insert"; at: number; bytes: Uint8Array }
  | { kind: "drop"; at: number; count: number };

/** A mutation of a byte stream. */
export const mutationArb: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({
    kind: fc.constant("set" as const),
    at: fc.nat(),
    byte: fc.oneof(
      fc.nat({ max: 255 }),
      fc.constantFrom(0x00, 0xff, 0x89, 0x41, 0x1b, 0x5f, 0x9f, 0xbf, 0xfb),
    ),
  }),
  fc.record({ kind: fc.constant("cut" as const), at: fc.nat() }),
  fc.record({
    kind: fc.constant("insert" as const),
    at: fc.nat(),
    bytes: fc.oneof(fc.uint8Array({ maxLength: 8 }), hostileHeaderArb),
  }),
  fc.record({
    kind: fc.constant("drop" as const),
    at: fc.nat(),
    count: fc.integer({ min: 1, max: 8 }),
  }),
);

/**
 * Applies mutations to a copy of a byte stream.
 *
 * @param data The stream.
 * @param mutations What to change.
 * @returns The mutated copy.
 */
export function mutate(
  data: Uint8Array,
  mutations: readonly Mutation[],
): Uint8Array {
  let out: Uint8Array = data.slice();
  for (const m of mutations) {
    const at = out.length === 0 ? 0 : m.at % out.length;
    switch (m.kind) {
      case "set":
        if (out.length > 0) out[at] = m.byte;
        break;
      case "cut":
        out = out.slice(0, at);
        break;
      case "insert":
        out = concat([out.subarray(0, at), m.bytes, out.subarray(at)]);
        break;
      case "drop":
        out = concat([out.subarray(0, at), out.subarray(at + m.count)]);
        break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Amplifiers: few bytes, much memory
// ---------------------------------------------------------------------------

/**
 * The CBOR head of a major type with its argument (a count or a length).
 *
 * @param major The major type, 0 to 7.
 * @param n The argument, below 2^32.
 * @returns The bytes.
 */
export function cborHead(major: number, n: number): Uint8Array {
  const m = major << 5;
  if (n < 24) return new Uint8Array([m | n]);
  if (n < 0x100) return new Uint8Array([m | 24, n]);
  if (n < 0x10000) return new Uint8Array([m | 25, n >> 8, n & 0xff]);
  return new Uint8Array([
    m | 26,
    n >>> 24,
    (n >>> 16) & 0xff,
    (n >>> 8) & 0xff,
    n & 0xff,
  ]);
}

const text = (s: string): Uint8Array => new TextEncoder().encode(s);

/** Tag 27000 [0, length]: the first `length` bytes of the attachment area. */
function attachmentRef(length: number): Uint8Array {
  return concat([
    new Uint8Array([0xd9, 0x69, 0x78, 0x82, 0x00]),
    cborHead(0, length),
  ]);
}

/** The attachment area the amplifiers refer to. */
export const AMPLIFIER_AREA_BYTES = 4096;

/**
 * One encoded item of each kind of value the decoder builds, each a few
 * bytes on the wire and tens to thousands of bytes in memory (the last
 * two copy bytes: 4 KiB of the attachment area, and a misaligned typed
 * array out of the head). Attachments refer to an area of
 * {@linkcode AMPLIFIER_AREA_BYTES}.
 */
export const AMPLIFIERS: Readonly<Record<string, Uint8Array>> = {
  "an empty array": new Uint8Array([0x80]),
  "an empty object": new Uint8Array([0xa0]),
  "an empty byte string": new Uint8Array([0x40]),
  "an empty Set": new Uint8Array([0xd9, 0x01, 0x02, 0x80]),
  "an empty Map": new Uint8Array([0xd9, 0x01, 0x03, 0xa0]),
  "a Date": new Uint8Array([0xc1, 0x00]),
  "a URL": new Uint8Array([0xd8, 0x20, 0x62, 0x61, 0x3a]),
  "a RegExp": new Uint8Array([0xd8, 0x23, 0x60]),
  "a bignum": new Uint8Array([0xc2, 0x40]),
  "a DataView": new Uint8Array([0xd9, 0x69, 0x7b, 0x40]),
  "a typed array": new Uint8Array([0xd8, 0x48, 0x40]),
  "an error": concat([
    new Uint8Array([0xd9, 0x69, 0x79, 0xa2, 0x64]),
    text("name"),
    new Uint8Array([0x60, 0x67]),
    text("message"),
    new Uint8Array([0x60]),
  ]),
  "an attachment view": attachmentRef(0),
  "an ArrayBuffer copied from an attachment": concat([
    new Uint8Array([0xd9, 0x69, 0x7a]),
    attachmentRef(AMPLIFIER_AREA_BYTES),
  ]),
  "a misaligned Uint16Array copied out of the head": new Uint8Array([
    0xd8,
    0x45,
    0x42,
    0x00,
    0x00,
  ]),
};

/**
 * An array of `count` copies of one encoded item.
 *
 * @param item The item's bytes.
 * @param count How many.
 * @returns The array's bytes.
 */
export function repeated(item: Uint8Array, count: number): Uint8Array {
  const head = cborHead(4, count);
  const out = new Uint8Array(head.byteLength + item.byteLength * count);
  out.set(head);
  if (item.byteLength === 1) {
    out.fill(item[0]!, head.byteLength);
  } else {
    for (let i = 0; i < count; i++) {
      out.set(item, head.byteLength + i * item.byteLength);
    }
  }
  return out;
}

/** Largest head {@linkcode amplifierArb} builds. */
const MAX_AMPLIFIER_BYTES = 64 * 1024;

/** How an amplifier wraps the level below: its container and count. */
interface AmplifierLevel {
  kind: "array" | "object" | "set" | "map";
  count: number;
}

function wrap(child: Uint8Array, level: AmplifierLevel): Uint8Array {
  const count = Math.min(
    level.count,
    Math.floor(MAX_AMPLIFIER_BYTES / (child.byteLength + 2)),
  );
  switch (level.kind) {
    case "array":
      return repeated(child, count);
    case "set":
      return concat([
        new Uint8Array([0xd9, 0x01, 0x02]),
        repeated(child, count),
      ]);
    case "object":
    case "map": {
      // Keys: the empty text for objects (one property, rewritten), distinct
      // small integers for maps (every entry kept).
      const parts: Uint8Array[] = [];
      if (level.kind === "map") parts.push(new Uint8Array([0xd9, 0x01, 0x03]));
      parts.push(cborHead(5, count));
      for (let i = 0; i < count; i++) {
        parts.push(
          level.kind === "map" ? cborHead(0, i) : new Uint8Array([0x60]),
        );
        parts.push(child);
      }
      return concat(parts);
    }
  }
}

/**
 * A head built of nested repetitions of amplifiers (up to 64 KiB), with
 * the attachment area its references point into.
 */
export const amplifierArb: fc.Arbitrary<
  { head: Uint8Array; area: Uint8Array }
> = fc.tuple(
  fc.constantFrom(...Object.values(AMPLIFIERS)),
  fc.array(
    fc.record({
      kind: fc.constantFrom("array", "object", "set", "map"),
      count: fc.oneof(
        fc.nat({ max: 64 }),
        fc.integer({ min: 1000, max: 100_000 }),
      ),
    }),
    { minLength: 1, maxLength: 3 },
  ),
).map(([item, levels]) => ({
  head: levels.reduce<Uint8Array>(wrap, item),
  area: new Uint8Array(AMPLIFIER_AREA_BYTES),
}));

// ---------------------------------------------------------------------------
// Exact comparison
// ---------------------------------------------------------------------------

const STANDARD_ERRORS: readonly unknown[] = [
  Error,
  TypeError,
  RangeError,
  SyntaxError,
  ReferenceError,
  EvalError,
  URIError,
  AggregateError,
];

function kindOf(v: object): string {
  if (Array.isArray(v)) return "Array";
  const proto: unknown = Object.getPrototypeOf(v);
  if (proto === Object.prototype || proto === null) return "Object";
  if (v instanceof Error) return "Error";
  if (v instanceof DataView) return "DataView";
  if (ArrayBuffer.isView(v)) {
    return String((v as { [Symbol.toStringTag]?: string })[Symbol.toStringTag]);
  }
  if (v instanceof Date) return "Date";
  if (v instanceof Map) return "Map";
  if (v instanceof Set) return "Set";
  if (v instanceof RegExp) return "RegExp";
  if (v instanceof URL) return "URL";
  if (v instanceof ArrayBuffer) return "ArrayBuffer";
  return "other";
}

function bytesOf(v: ArrayBufferView | ArrayBuffer): Uint8Array {
  return v instanceof ArrayBuffer
    ? new Uint8Array(v)
    : new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

function errorKeys(error: Error): string[] {
  return Object.keys(error).filter((k) =>
    k !== "name" && k !== "message" && k !== "stack" && k !== "cause"
  );
}

/**
 * Exact structural difference: tells -0 from 0 and bigint from number,
 * typed array kinds apart, compares Map/Set entries in order, dates by time,
 * errors by class, name, message, stack, cause and own properties.
 *
 * @param actual What came back.
 * @param expected What went in.
 * @param path Where, for the description.
 * @returns A description of the first difference, or `undefined`.
 */
export function difference(
  actual: unknown,
  expected: unknown,
  path = "value",
): string | undefined {
  if (typeof actual !== typeof expected) {
    return `${path}: ${typeof actual} instead of ${typeof expected}`;
  }
  if (typeof expected !== "object" || expected === null || actual === null) {
    return Object.is(actual, expected)
      ? undefined
      : `${path}: ${String(actual)} instead of ${String(expected)}`;
  }
  const a = actual as object;
  const kind = kindOf(expected);
  if (kindOf(a) !== kind) return `${path}: a ${kindOf(a)} instead of a ${kind}`;
  switch (kind) {
    case "Array": {
      const x = a as unknown[];
      const y = expected as unknown[];
      if (x.length !== y.length) return `${path}: length ${x.length}`;
      for (let i = 0; i < y.length; i++) {
        const d = difference(x[i], y[i], `${path}[${i}]`);
        if (d) return d;
      }
      return undefined;
    }
    case "Object": {
      const xk = Object.keys(a);
      const yk = Object.keys(expected);
      if (xk.join("\u0000") !== yk.join("\u0000")) {
        return `${path}: keys ${JSON.stringify(xk)} instead of ${
          JSON.stringify(yk)
        }`;
      }
      for (const k of yk) {
        const d = difference(
          (a as Record<string, unknown>)[k],
          (expected as Record<string, unknown>)[k],
          `${path}.${k}`,
        );
        if (d) return d;
      }
      return undefined;
    }
    case "Date":
      return Object.is((a as Date).getTime(), (expected as Date).getTime())
        ? undefined
        : `${path}: another time`;
    case "Map":
    case "Set":
      return difference(
        [...(a as Map<unknown, unknown>).entries()],
        [...(expected as Map<unknown, unknown>).entries()],
        `${path}.entries()`,
      );
    case "RegExp":
      return String(a) === String(expected) ? undefined : `${path}: ${a}`;
    case "URL":
      return (a as URL).href === (expected as URL).href
        ? undefined
        : `${path}: ${a}`;
    case "Error": {
      const x = a as Error;
      const y = expected as Error;
      const yClass = Object.getPrototypeOf(y).constructor;
      const expectedClass = STANDARD_ERRORS.includes(yClass) ? yClass : Error;
      if (Object.getPrototypeOf(x).constructor !== expectedClass) {
        return `${path}: another error class`;
      }
      for (const field of ["name", "message", "stack"] as const) {
        if (x[field] !== y[field]) return `${path}.${field} differs`;
      }
      if (Object.hasOwn(x, "cause") !== Object.hasOwn(y, "cause")) {
        return `${path}.cause: presence differs`;
      }
      const d = difference(x.cause, y.cause, `${path}.cause`);
      if (d) return d;
      if (y instanceof AggregateError) {
        const e = difference(
          (x as AggregateError).errors,
          y.errors,
          `${path}.errors`,
        );
        if (e) return e;
      }
      const props = (e: Error) =>
        Object.fromEntries(
          errorKeys(e).map((
            k,
          ) => [k, (e as unknown as Record<string, unknown>)[k]]),
        );
      return difference(props(x), props(y), `${path}(own properties)`);
    }
    default:
      return sameBytes(
          bytesOf(a as ArrayBufferView),
          bytesOf(expected as ArrayBufferView),
        )
        ? undefined
        : `${path}: bytes differ`;
  }
}
