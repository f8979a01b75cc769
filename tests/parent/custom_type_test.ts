import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { registerType, session } from "../../mod.ts";
import { Money } from "../fixtures/money.ts";
import type money from "../fixtures/money_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";

checkNoLeaks();

describe("registerType()", needsWorkers(), () => {
  test("registerType() lets instances of a class cross both ways, prototype included", async () => {
    await using s = await session<typeof money>(
      fixture("money_worker.ts"),
      captureLog(),
    );
    const total = await s.total([
      new Money(150n, "EUR"),
      new Money(250n, "EUR"),
    ]);
    assert.ok(total instanceof Money);
    assert.equal(total.cents, 400n);
    assert.equal(await s.isMoney(new Money(1n, "USD")), true);
  });

  test("registerType() refuses a duplicate name and a malformed type", () => {
    assert.throws(
      () =>
        registerType({
          name: "Money",
          is: (v): v is Money => v instanceof Money,
          encode: String,
          decode: String,
        }),
      /already registered/,
    );
    assert.throws(
      () =>
        registerType(
          {
            name: "",
            is: () => false,
            encode: String,
            decode: String,
          } as never,
        ),
      TypeError,
    );
  });

  test("an unregistered class is still refused, naming where it sits", async () => {
    class Point {
      constructor(readonly x: number) {}
    }
    await using s = await session(fixture("money_worker.ts"), captureLog());
    const error = await s.call("isMoney", [{ at: new Point(1) }]).catch((e) =>
      e
    );
    assert.ok(error instanceof TypeError);
    assert.match(error.message, /args\[0\]\.at.*Point/);
  });
});
