// Attack class: symbolic links out of a grant. With read/write granted on
// a directory A, a link A/link -> / let a Deno worker read /etc/shadow, list
// /root and write outside A (Deno's flags check the path as written). Every
// worker now runs in the OS sandbox, which shows only the grants: the link
// leads nowhere. And a grant that is itself a link a worker could have made
// is refused before anything starts.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PermissionError, session } from "../../mod.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { HOSTILE, sandboxSkip } from "./_sandbox.ts";
import type hostile from "../fixtures/security/hostile_worker.ts";

checkNoLeaks();

const SKIP = sandboxSkip();
const scratch = realpathSync(mkdtempSync(join(tmpdir(), "airlock-links-")));
after(() => rmSync(scratch, { recursive: true, force: true }));
const secretDir = join(scratch, "secret");
mkdirSync(secretDir);
writeFileSync(join(secretDir, "s.txt"), "outside-secret");

describe("links out of a grant", () => {
  for (const runtime of ["deno", "bun"] as const) {
    test(
      `a ${runtime} worker cannot read or write through a link to / inside its grant`,
      {
        skip: SKIP,
      },
      async () => {
        const a = join(scratch, `A-${runtime}`);
        mkdirSync(a);
        symlinkSync("/", join(a, "link"));
        await using s = await session<typeof hostile>(HOSTILE, {
          runtime,
          permissions: { read: [a], write: [a] },
        });
        const through = join(a, "link", secretDir.slice(1), "s.txt");
        const read = await s.read(through);
        assert.equal(read.ok, false, JSON.stringify(read));
        assert.equal((await s.list(join(a, "link", "root"))).ok, false);
        const outside = join(a, "link", scratch.slice(1), `escaped-${runtime}`);
        await s.write(outside, "x");
        assert.equal(existsSync(join(scratch, `escaped-${runtime}`)), false);
      },
    );
  }

  test("a grant that is a link made where a worker may write is refused", {
    skip: SKIP,
  }, async () => {
    const project = join(scratch, "project");
    mkdirSync(project);
    // A worker granted the project replaced its data directory with a link.
    symlinkSync(secretDir, join(project, "data"));
    const error = await session(HOSTILE, {
      runtime: RUNTIME,
      permissions: { write: [project], read: [join(project, "data")] },
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(error instanceof PermissionError, String(error));
    assert.equal(error.permission, "read");
  });
});
