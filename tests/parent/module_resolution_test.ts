import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { tmpdir } from "node:os";
import { session, WorkerStartError } from "../../mod.ts";
import type project from "../fixtures/project/workers/project_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { OTHER_RUNTIME, RUNTIME, testOn } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { rejection } from "../_helpers/wait.ts";

checkNoLeaks();

const projectWorker = fixture("project/workers/project_worker.ts");

describe("module resolution", () => {
  for (const runtime of [RUNTIME, OTHER_RUNTIME]) {
    test(
      `session() on ${runtime} resolves the project's npm package and subpath imports, from any cwd`,
      needsWorkers(runtime),
      async () => {
        await using s = await session<typeof project>(projectWorker, {
          ...captureLog(),
          runtime,
          cwd: tmpdir(),
        });
        assert.equal(await s.shout("hi"), "HI! (from #lib)");
      },
    );
  }

  testOn(
    "deno",
    "session() uses the deno.json import map of the worker's project",
    async () => {
      // Typed loosely: the test's own type-check does not see that project's map.
      await using s = await session(
        fixture("deno_project/workers/mapped_worker.ts"),
        { ...captureLog(), cwd: tmpdir() },
      );
      assert.equal(await s.call("greet", ["airlock"]), "hello, airlock");
    },
  );

  testOn(
    "deno",
    "session() config option overrides the discovered config",
    async () => {
      // The repo's own deno.json has no "greeting/" map: the import fails.
      const failed = await rejection(
        session(fixture("deno_project/workers/mapped_worker.ts"), {
          ...captureLog(),
          config: fixture("project/package.json").pathname.replace(
            "package.json",
            "../../../deno.json",
          ),
        }),
        WorkerStartError,
      );
      assert.equal(failed.failure, "import");
      assert.match(
        failed.remoteMessage ?? "",
        /"greeting\/hello\.ts".*not in import map/,
      );
    },
  );
});
