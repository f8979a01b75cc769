import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, realpathSync, writeFileSync } from "node:fs";
import { bwrapUsable } from "../../src/runtime/confine/bwrap_usable.ts";
import { landlockBestEffort } from "../../src/runtime/confine/wrapper.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { checkNoLeaks, hasTool, needs, scratchDir } from "../_helpers.ts";

checkNoLeaks();

const dir = scratchDir("backends");
after(() => dir[Symbol.dispose]());

describe("bwrapUsable()", () => {
  test("bwrapUsable() says why an installed bubblewrap cannot run", () => {
    // What bubblewrap prints where user namespaces are forbidden.
    const fake = dir.join("bwrap");
    writeFileSync(
      fake,
      "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n",
    );
    chmodSync(fake, 0o755);
    assert.deepEqual(bwrapUsable(fake), {
      usable: false,
      reason: "bwrap: No permissions to create new namespace",
    });
  });

  test("bwrapUsable() finds the real bubblewrap usable", needs("bwrap"), () => {
    const found = hasTool("bwrap") ? "/usr/bin/bwrap" : "";
    assert.deepEqual(bwrapUsable(realpathSync(found)), {
      usable: true,
    });
  });
});

describe("landlockBestEffort()", () => {
  const base = {
    used: false,
    runtime: "bun" as const,
    sandbox: "auto" as const,
    permissions: resolvePermissions({ enforce: "best-effort" }, "/"),
    bwrap: false,
    landlockUsable: true,
  };

  test("landlockBestEffort() confines a best-effort Bun or command worker as far as Landlock goes", () => {
    assert.equal(landlockBestEffort(base), true);
    assert.equal(landlockBestEffort({ ...base, runtime: "command" }), true);
  });

  test("landlockBestEffort() adds nothing where the decision, the options or the machine say no", () => {
    assert.equal(landlockBestEffort({ ...base, used: true }), false);
    assert.equal(landlockBestEffort({ ...base, runtime: "deno" }), false);
    assert.equal(landlockBestEffort({ ...base, sandbox: "none" }), false);
    assert.equal(landlockBestEffort({ ...base, bwrap: true }), false);
    assert.equal(landlockBestEffort({ ...base, landlockUsable: false }), false);
    assert.equal(
      landlockBestEffort({
        ...base,
        permissions: resolvePermissions(undefined, "/"),
      }),
      false,
    );
    assert.equal(
      landlockBestEffort({
        ...base,
        permissions: resolvePermissions("all", "/"),
      }),
      false,
    );
  });
});
