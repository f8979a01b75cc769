/**
 * A worker that holds a DuckDB database open: `@duckdb/node-api` loads a
 * native addon and takes a file lock that lasts as long as the process. Run by
 * `main.ts`; the parent imports its type only. In your project, import
 * `defineWorker` from `@airlock/airlock/worker`.
 *
 * @module
 */

import { type DuckDBConnection, DuckDBInstance } from "@duckdb/node-api";
import process from "node:process";
import { defineWorker } from "../../worker.ts";

let connection: DuckDBConnection | undefined;

function connected(): DuckDBConnection {
  if (!connection) throw new Error("Cannot query: call open(path) first");
  return connection;
}

export default defineWorker({
  /** Opens (or creates) the database file; the lock is held from now on. */
  async open(path: string): Promise<void> {
    const instance = await DuckDBInstance.create(path);
    connection = await instance.connect();
  },
  /** Runs SQL and returns the rows as plain JSON-like objects. */
  async query(sql: string): Promise<Record<string, unknown>[]> {
    const reader = await connected().runAndReadAll(sql);
    return reader.getRowObjectsJson() as Record<string, unknown>[];
  },
  /** This worker's pid. */
  whoami(): number {
    return process.pid;
  },
});
