// sha256Hex(): the start's hashes without node:crypto (issue 23 item 4),
// byte for byte what node:crypto gives (the code cache's directory names
// stay those of earlier versions).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { sha256Hex } from "../../src/runtime/sha256.ts";

describe("sha256Hex()", () => {
  test("sha256Hex() equals node:crypto's SHA-256 across block boundaries, for strings and bytes", () => {
    // The FIPS 180-4 example, then every length around a 64-byte block's
    // padding limit (55, 56) and a few blocks.
    assert.equal(
      sha256Hex("abc"),
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    );
    for (const length of [0, 1, 54, 55, 56, 57, 63, 64, 65, 119, 120, 1000]) {
      const text = "aé€😀".repeat(length).slice(0, length);
      assert.equal(
        sha256Hex(text),
        createHash("sha256").update(text).digest("hex"),
        `length ${length}`,
      );
      const bytes = new Uint8Array(length).map((_, i) => (i * 131 + 7) & 255);
      assert.equal(
        sha256Hex(bytes),
        createHash("sha256").update(bytes).digest("hex"),
        `${length} bytes`,
      );
    }
  });
});
