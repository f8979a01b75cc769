// deno-lint-ignore-file no-console
/**
 * LanceDB in a worker: after the table is rebuilt with a new vector
 * dimension, a client opened in-process before the rebuild fails, and so does
 * a long-lived worker that opened it before; `restart()` gives a worker that
 * serves the new table.
 *
 * Run from this folder after `npm install`:
 *
 *     deno run -A main.ts        # or: bun main.ts
 *
 * In your project, import from `@airlock/airlock` instead of `../../mod.ts`.
 *
 * @module
 */

import * as lancedb from "@lancedb/lancedb";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { oneShot, session } from "../../mod.ts";
import type vectors from "./lancedb_worker.ts";

const worker = new URL("./lancedb_worker.ts", import.meta.url);
const root = mkdtempSync(join(tmpdir(), "airlock-lancedb-"));
const uri = join(root, "vectors");
// The native addon needs `ffi`. The grant is the parent directory of the
// database, so that a rebuild that deletes and recreates the database stays
// inside it.
// /usr/bin/ldd: the addon's loader reads it to tell glibc from musl; where it
// cannot, it asks process.report.getReport(), which on Deno lists the network
// interfaces (ignoring excludeNetwork) and fails in a sandbox without `net`.
const permissions = {
  read: [root, "/usr/bin/ldd"],
  write: [root],
  ffi: true,
  env: ["NAPI_RS_*"],
  sys: true,
};
const query = (dim: number) => Array.from({ length: dim }, (_, i) => i / dim);

function failure(error: unknown): string {
  return error instanceof Error
    ? `${error.name}: ${error.message.split("\n")[0]}`
    : String(error);
}

try {
  const admin = oneShot<typeof vectors>(worker, { permissions });
  await admin.rebuild(uri, 3, 100);
  console.log("built items: 100 vectors of 3 dimensions");

  const inProcess = await (await lancedb.connect(uri)).openTable("items");
  const local = await inProcess.vectorSearch(query(3)).limit(2).toArray();
  console.log(`in-process client: ${local.map((row) => row.id).join(", ")}`);

  await using s = await session<typeof vectors>(worker, { permissions });
  console.log(
    `worker ${s.pid}: ${JSON.stringify(await s.search(uri, query(3), 2))}`,
  );

  await admin.rebuild(uri, 8, 100);
  console.log("rebuilt items: 100 vectors of 8 dimensions");

  const stale = await inProcess.vectorSearch(query(8)).limit(2).toArray().then(
    () => undefined,
    failure,
  );
  if (!stale) throw new Error("the in-process client should have failed");
  console.log(`in-process client, 8-dimension query: ${stale}`);
  const staleWorker = await s.search(uri, query(8), 2).then(
    () => undefined,
    failure,
  );
  if (!staleWorker) throw new Error("the old worker should have failed");
  console.log(`worker ${s.pid}, opened before the rebuild: ${staleWorker}`);

  await s.restart();
  console.log(
    `restarted worker ${s.pid}: ${
      JSON.stringify(await s.search(uri, query(8), 2))
    }`,
  );
} finally {
  rmSync(root, { recursive: true, force: true });
}
