// Attack class: the project's .env leaking into a worker. Bun loads .env
// (and .env.local, .env.<NODE_ENV>) from the working directory into
// process.env: a Bun worker saw DB_PASSWORD from the project's .env. Bun
// workers now start with --no-env-file; the environment is exactly `env`
// (plus `inheritEnv`) on both runtimes.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { session } from "../../mod.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { HOSTILE, sandboxSkip } from "./_sandbox.ts";
import type hostile from "../fixtures/security/hostile_worker.ts";

checkNoLeaks();

const SKIP = sandboxSkip();
const project = realpathSync(mkdtempSync(join(tmpdir(), "airlock-dotenv-")));
after(() => rmSync(project, { recursive: true, force: true }));
writeFileSync(join(project, ".env"), "DB_PASSWORD=hunter2\n");
writeFileSync(join(project, ".env.local"), "API_TOKEN=secret\n");

describe(".env files", () => {
  for (const runtime of ["bun", "deno"] as const) {
    test(
      `a ${runtime} worker's environment is exactly env, whatever .env files its directory holds`,
      {
        skip: SKIP,
      },
      async () => {
        await using s = await session<typeof hostile>(HOSTILE, {
          runtime,
          cwd: project,
          env: { GIVEN: "yes" },
          permissions: { read: [project], env: true },
        });
        const outcome = await s.environment();
        assert.ok(outcome.ok, JSON.stringify(outcome));
        const env = outcome.value as Record<string, string>;
        assert.equal(env.GIVEN, "yes");
        assert.equal(env.DB_PASSWORD, undefined);
        assert.equal(env.API_TOKEN, undefined);
      },
    );
  }
});
