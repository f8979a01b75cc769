import { describe, test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import { encodeValue } from "../../src/protocol/encode_value.ts";
import { registerType } from "../../src/protocol/register_type.ts";
import { ProtocolError } from "../../src/errors.ts";
import { concat } from "./_arbitraries.ts";
import { fuzzTargets } from "./_fuzz.ts";
import {
  assertProtocolError,
  assertSame,
  bytes,
  decodeOrProtocolError,
  hex,
  keyArb,
  richValueArb as valueArb,
  roundTrip,
} from "./_codec.ts";

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
      [[0x61], /length/],
      [[0x61, 0x80], /UTF-8/],
      [[0x61, 0xff], /UTF-8/],
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

  test("decodeValue() only ever throws ProtocolError on mutated rows of a compiled shape", () => {
    // The shape's object literal is compiled code (_shapes.ts): hostile
    // bytes against a compiled shape must still only return or refuse.
    // Keys from a small pool: shapes recur (a process compiles at most 512).
    const names = ["id", "name", "score", "at", "tags", "note", "x", "$y"];
    fc.assert(
      fc.property(
        fc.shuffledSubarray(names, { minLength: 1, maxLength: 6 }),
        fc.array(fc.record({ at: fc.nat(), byte: fc.nat({ max: 255 }) }), {
          minLength: 1,
          maxLength: 4,
        }),
        (keys, mutations) => {
          const rows = Array.from(
            { length: 24 },
            (_, i) => Object.fromEntries(keys.map((key, j) => [key, i + j])),
          );
          const { head } = encodeValue(rows);
          // 24 rows: compiled after the 16th, used for the rest.
          assertSame(decodeValue(head), rows);
          const bytes = head.slice();
          for (const m of mutations) bytes[m.at % bytes.length] = m.byte;
          decodeOrProtocolError(bytes, new Uint8Array(0));
        },
      ),
      { numRuns: 300 },
    );
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
