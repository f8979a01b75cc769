// Attack class: a start-time race on a grant (issue 24 item 1). A worker
// with `write: [D]` swaps `D/pub` between a directory and a link to a secret
// directory in a loop, while the parent starts workers with `read: [D/pub]`.
// 0.2 checked the grant once (a link where a worker may write was refused,
// a missing path skipped), then handed bubblewrap and Landlock the path
// string, resolved again later, following links: 2 of 21 to 7 of 17 Deno
// workers and 4 of 8 to 8 of 25 Bun workers read the link's target. Now the
// parent resolves each grant once, without following links, and what it
// checked is what the sandbox binds: a start sees the directory or fails
// (a grant missing or a link at start is an error). Runs with bubblewrap
// and Landlock, and (second CI pass) with Landlock alone.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, realpathSync, symlinkSync, writeFileSync } from "node:fs";
import { AirlockError, PermissionError, session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture, scratchDir } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { sandboxSkip } from "./_sandbox.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
const SKIP = sandboxSkip();

/** Swaps `pub` between the directory and the link until `stop` appears. */
const SWAP = `
const [dir, deadline] = arg;
const join = (name) => dir + "/" + name;
let swaps = 0;
while (!fs.existsSync(join("stop")) && Date.now() < deadline) {
  fs.renameSync(join("pub"), join("pub.dir"));
  fs.renameSync(join("pub.link"), join("pub"));
  fs.renameSync(join("pub"), join("pub.link"));
  fs.renameSync(join("pub.dir"), join("pub"));
  swaps++;
}
return swaps;`;

const STARTS = 24;

describe("a grant raced at start", { skip: SKIP }, () => {
  test(
    `a ${RUNTIME} worker granted read on a directory another worker swaps for a link never sees the link's target`,
    async () => {
      using scratch = scratchDir("grant-race");
      const root = realpathSync(scratch.path);
      const shared = `${root}/D`;
      const secret = `${root}/secret`;
      mkdirSync(`${shared}/pub`, { recursive: true });
      mkdirSync(secret);
      writeFileSync(`${shared}/pub/s.txt`, "public");
      writeFileSync(`${secret}/s.txt`, "outside-secret");
      // What the swapping worker could make itself.
      symlinkSync(secret, `${shared}/pub.link`);

      await using swapper = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: RUNTIME,
        permissions: { read: [shared], write: [shared] },
        callTimeoutMs: 120_000,
      });
      const swapping = swapper.run(SWAP, [shared, Date.now() + 90_000]);
      const seen: string[] = [];
      let started = 0;
      try {
        for (let attempt = 0; attempt < STARTS; attempt++) {
          let reader;
          try {
            reader = await session<typeof evaluate>(worker, {
              ...captureLog(),
              runtime: RUNTIME,
              permissions: { read: [`${shared}/pub`] },
            });
          } catch (error: unknown) {
            // Refused at start (a link, or missing): what must happen then.
            assert.ok(error instanceof AirlockError, String(error));
            continue;
          }
          started++;
          try {
            const outcome = await reader.run(
              "return fs.readFileSync(arg, 'utf8')",
              `${shared}/pub/s.txt`,
            );
            if (outcome.ok) seen.push(String(outcome.value));
          } finally {
            await reader.close();
          }
          if (seen.includes("outside-secret")) break;
        }
      } finally {
        writeFileSync(`${shared}/stop`, "");
      }
      const swaps = await swapping;
      assert.ok(swaps.ok, JSON.stringify(swaps));
      assert.ok(
        !seen.includes("outside-secret"),
        `a reader saw the link's target (${started} started, read ${
          JSON.stringify(seen)
        }, ${JSON.stringify(swaps.value)} swaps)`,
      );
      // Raced no more, the grant is the directory, and it is bound.
      await using reader = await session<typeof evaluate>(worker, {
        ...captureLog(),
        runtime: RUNTIME,
        permissions: { read: [`${shared}/pub`] },
      });
      assert.deepEqual(
        await reader.run(
          "return fs.readFileSync(arg, 'utf8')",
          `${shared}/pub/s.txt`,
        ),
        { ok: true, value: "public" },
      );
    },
  );

  test(`a ${RUNTIME} worker's grant that is missing where a worker may write is refused, not skipped`, async () => {
    using scratch = scratchDir("grant-missing");
    const shared = realpathSync(scratch.path);
    await using writer = await session<typeof evaluate>(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: { write: [shared] },
    });
    assert.ok((writer.pid ?? 0) > 0);
    const error = await session(worker, {
      ...captureLog(),
      runtime: RUNTIME,
      permissions: { read: [`${shared}/later`] },
    }).then(() => undefined, (e: unknown) => e);
    assert.ok(error instanceof PermissionError, String(error));
    assert.equal(error.permission, "read");
    assert.match(error.message, /does not exist/);
  });
});
