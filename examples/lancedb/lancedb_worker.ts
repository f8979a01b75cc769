/**
 * A worker that holds a LanceDB table open: `@lancedb/lancedb` is a native
 * addon whose table handle keeps the schema it was opened with. Run by
 * `main.ts`; the parent imports its type only. In your project, import
 * `defineWorker` from `@airlock/airlock/worker`.
 *
 * @module
 */

import * as lancedb from "@lancedb/lancedb";
import { rmSync } from "node:fs";
import process from "node:process";
import { defineWorker } from "../../worker.ts";

/** One search hit. */
export interface Hit {
  /** The row's id. */
  id: number;
  /** Its distance to the query vector. */
  distance: number;
}

let table: lancedb.Table | undefined;

async function items(uri: string): Promise<lancedb.Table> {
  if (!table) table = await (await lancedb.connect(uri)).openTable("items");
  return table;
}

export default defineWorker({
  /** Deletes the database and builds `items` anew with `count` vectors of `dim` dimensions. */
  async rebuild(uri: string, dim: number, count: number): Promise<void> {
    rmSync(uri, { recursive: true, force: true });
    const rows = Array.from({ length: count }, (_, id) => ({
      id,
      vector: Array.from({ length: dim }, (_, i) => Math.sin(id * dim + i)),
    }));
    const db = await lancedb.connect(uri);
    await db.createTable("items", rows);
    db.close();
  },
  /** The `k` rows nearest to `vector`, from the table this process opened first. */
  async search(uri: string, vector: number[], k: number): Promise<Hit[]> {
    const rows = await (await items(uri)).vectorSearch(vector).limit(k)
      .toArray();
    return rows.map((row: { id: number; _distance: number }) => ({
      id: Number(row.id),
      distance: Number(row._distance.toFixed(4)),
    }));
  },
  /** This worker's pid. */
  whoami(): number {
    return process.pid;
  },
});
