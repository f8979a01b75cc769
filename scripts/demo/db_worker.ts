/**
 * The demo's worker module: a `node:sqlite` client opened lazily, once per
 * process and path, as a native database client would be. It is started by
 * `scripts/demo.ts` through `oneShot` and `session`; the parent imports its
 * type only. Not a test file.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";
import { readFileSync } from "node:fs";
import process from "node:process";
import { defineWorker } from "../../worker.ts";

/** One row of the demo's `items` table, whatever its schema. */
export type Row = Record<string, string | number | null>;

const clients = new Map<string, DatabaseSync>();

/**
 * This process's identity. Not its pid: a sandboxed worker has a pid
 * namespace of its own, where its pid is always 2.
 */
const PROCESS_ID = crypto.randomUUID().slice(0, 8);

/** The client of `path`, opened on first use and kept for the process's life. */
function client(path: string): DatabaseSync {
  let db = clients.get(path);
  if (!db) {
    db = new DatabaseSync(path);
    clients.set(path, db);
  }
  return db;
}

interface BunFfi {
  read: { u8(pointer: number): number };
}

/** Reads one byte at address 8: a real memory fault in native code. */
async function readAddress8(): Promise<number> {
  const global = globalThis as {
    Bun?: unknown;
    Deno?: {
      UnsafePointer: { create(value: bigint): unknown };
      UnsafePointerView: new (pointer: unknown) => { getUint8(): number };
    };
  };
  if (global.Bun) {
    const name = "bun:ffi";
    const ffi = await import(name) as BunFfi;
    return ffi.read.u8(8);
  }
  const deno = global.Deno;
  if (!deno) throw new Error("neither Deno nor Bun");
  return new deno.UnsafePointerView(deno.UnsafePointer.create(8n)).getUint8();
}

export default defineWorker({
  /** The rows of `items`, in id order. */
  rows(path: string): Row[] {
    return client(path).prepare("select * from items order by id")
      .all() as Row[];
  },
  /** One column of `items`, in id order. */
  column(path: string, name: string): unknown[] {
    return client(path).prepare(`select ${name} from items order by id`).all()
      .map((row) => (row as Row)[name]);
  },
  /** Inserts a row (its keys are the column names) and returns the new id. */
  insert(path: string, row: Row): number {
    const names = Object.keys(row);
    const result = client(path).prepare(
      `insert into items (${names.join(", ")}) values (${
        names.map(() => "?").join(", ")
      })`,
    ).run(...Object.values(row));
    return Number(result.lastInsertRowid);
  },
  /** This worker process's identity (a random id made when it started). */
  whoami(): string {
    return PROCESS_ID;
  },
  /** Reads a text file. */
  readText(path: string): string {
    return readFileSync(path, "utf8");
  },
  /** Dies at once, as the out-of-memory killer would kill it. */
  die(): never {
    process.kill(process.pid, "SIGKILL");
    throw new Error("unreachable");
  },
  /** Dereferences a bad pointer in native code (needs the `ffi` permission). */
  segfault(): Promise<number> {
    return readAddress8();
  },
});
