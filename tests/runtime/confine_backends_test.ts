import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, realpathSync, writeFileSync } from "node:fs";
import { bwrapUsable } from "../../src/runtime/sandbox/facts.ts";
import { scratchDir } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { hasTool, needs } from "../_helpers/tools.ts";

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
