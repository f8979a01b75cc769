// deno-lint-ignore-file no-console
/**
 * DuckDB in a worker: while a live worker holds the database, a second
 * process cannot open it ("Could not set lock on file"); once the session is
 * closed, it can.
 *
 * Run from this folder after `npm install`:
 *
 *     deno run -A main.ts        # or: bun main.ts
 *
 * In your project, import from `@airlock/airlock` instead of `../../mod.ts`.
 *
 * @module
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { oneShot, RemoteError, session } from "../../mod.ts";
import type duckdb from "./duckdb_worker.ts";

const worker = new URL("./duckdb_worker.ts", import.meta.url);
const dir = mkdtempSync(join(tmpdir(), "airlock-duckdb-"));
const path = join(dir, "shop.duckdb");
// The native addon needs `ffi`; the database lives in `dir`, nothing else.
const permissions = { read: [dir], write: [dir], ffi: true };

try {
  const holder = await session<typeof duckdb>(worker, {
    permissions,
    setup: [["open", path]],
  });
  await holder.query(
    "create table orders as select range as id, range * 2.5 as total from range(5)",
  );
  const [held] = await holder.query("select count(*) as n from orders");
  console.log(`worker ${holder.pid} holds ${path}: ${JSON.stringify(held)}`);

  const other = oneShot<typeof duckdb>(worker, { permissions });
  const error = await other.open(path).then(() => undefined, (e: unknown) => e);
  if (!(error instanceof RemoteError)) {
    throw new Error(`expected a lock error, got ${String(error)}`);
  }
  console.log(`a second process cannot open it:\n  ${error.message}`);

  const pid = holder.pid;
  await holder.close();
  console.log(`closed the session: worker ${pid} has exited, its lock with it`);

  const reader = await session<typeof duckdb>(worker, {
    permissions,
    setup: [["open", path]],
  });
  const rows = await reader.query("select sum(total) as total from orders");
  console.log(
    `now another worker (${reader.pid}) opens it: ${JSON.stringify(rows)}`,
  );
  await reader.close();
} finally {
  rmSync(dir, { recursive: true, force: true });
}
