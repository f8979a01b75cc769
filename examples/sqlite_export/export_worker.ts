// The worker of the streamed export: it owns the node:sqlite client and
// streams a table row by row from a statement's iterator.
import { DatabaseSync } from "node:sqlite";
import process from "node:process";
import { defineWorker } from "../../worker.ts";

let db: DatabaseSync | undefined;

function open(path: string): DatabaseSync {
  db ??= new DatabaseSync(path);
  return db;
}

/** A row of the `events` table. */
export interface Event {
  /** Its key. */
  id: number;
  /** When it happened, as ISO text. */
  at: string;
  /** About 200 bytes of payload. */
  body: string;
}

export default defineWorker({
  /** Creates `events` with `rows` rows, reporting progress every 10,000. */
  fill(path: string, rows: number): number {
    const database = open(path);
    database.exec(
      "create table if not exists events (id integer primary key, at text, body text)",
    );
    const insert = database.prepare(
      "insert into events (id, at, body) values (?, ?, ?)",
    );
    const body = "x".repeat(200);
    database.exec("begin");
    for (let id = 1; id <= rows; id++) {
      insert.run(
        id,
        new Date(1_700_000_000_000 + id * 1000).toISOString(),
        body,
      );
      if (id % 10_000 === 0) this.progress(id);
    }
    database.exec("commit");
    return rows;
  },
  /** Streams every row of `events`, in key order. */
  async *events(path: string): AsyncGenerator<Event> {
    const statement = open(path).prepare(
      "select id, at, body from events order by id",
    );
    for (const row of statement.iterate()) yield row as unknown as Event;
  },
  /** The same rows in one array: what a handler without streaming returns. */
  allEvents(path: string): Event[] {
    return open(path).prepare("select id, at, body from events order by id")
      .all() as unknown as Event[];
  },
  /** Resident memory of this process, in bytes. */
  rss(): number {
    return process.memoryUsage().rss;
  },
});
