import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { encodeValue } from "../../src/protocol/encode_value.ts";
import { assertSame, roundTrip } from "./_codec.ts";

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

describe("encodeValue() heads", () => {
  test("encodeValue() heads stay intact through later encodes of every size (small heads share a slab)", () => {
    // Enough small heads to fill several slabs, with large ones in between.
    const kept: { value: unknown; head: Uint8Array; bytes: Uint8Array }[] = [];
    for (let i = 0; i < 3000; i++) {
      const value = i % 500 === 0
        ? { big: "x".repeat(4000 + i), i }
        : { op: "add", args: [i, "y".repeat(i % 37)] };
      const { head } = encodeValue(value, { prefixBytes: 12 });
      head.fill(0xee, 0, 12); // a caller writing its header in place
      kept.push({ value, head, bytes: head.slice() });
    }
    for (const { head, bytes } of kept) assert.deepEqual(head, bytes);
    const small = kept[1] as { head: Uint8Array };
    const next = kept[2] as { head: Uint8Array };
    assert.equal(
      small.head.buffer,
      next.head.buffer,
      "small heads share a slab",
    );
    assert.ok(
      small.head.byteOffset + small.head.byteLength <= next.head.byteOffset,
      "heads do not overlap",
    );
    const big = kept[500] as { head: Uint8Array };
    assert.equal(
      big.head.byteOffset,
      0,
      "a large head has a buffer of its own",
    );
  });
});
