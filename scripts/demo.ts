// deno-lint-ignore-file no-console
/**
 * The airlock walkthrough: `deno task demo` or `bun run scripts/demo.ts`.
 *
 * On a real embedded database that needs no download (`node:sqlite`, in both
 * runtimes), it shows with the real output of each step:
 *
 * 1. the problem: a client opened once in-process keeps serving stale rows
 *    after its data directory is wiped and recreated with another schema,
 *    then fails;
 * 2. `oneShot`: every call sees the disk as it is now, reads and writes alike;
 * 3. `session`: fast repeated calls, then `restart()` after the wipe;
 * 4. `session` with `watch`: the next call after a wipe runs on a fresh
 *    worker, with no restart by the caller;
 * 5. crash containment: SIGKILL and a real native crash (SIGSEGV) become a
 *    `WorkerCrashedError` with the signal, and the parent carries on;
 * 6. the permission scope: a worker that reads outside its data directory is
 *    refused.
 *
 * Every claim is checked: the demo exits 1 if one does not hold. It prints
 * timings per step; they are for reading, not for comparing machines.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";
import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { oneShot, RemoteError, session, WorkerCrashedError } from "../mod.ts";
import type db from "./demo/db_worker.ts";
import type { Row } from "./demo/db_worker.ts";

const WORKER = new URL("./demo/db_worker.ts", import.meta.url);
const RUNTIME = typeof (globalThis as { Bun?: unknown }).Bun === "object"
  ? `bun ${(globalThis as unknown as { Bun: { version: string } }).Bun.version}`
  : `deno ${
    (globalThis as unknown as { Deno: { version: { deno: string } } })
      .Deno.version.deno
  }`;

const root = mkdtempSync(join(tmpdir(), "airlock-demo-"));
const dataDir = join(root, "data");
const dbPath = join(dataDir, "app.db");
const secretDir = join(root, "secret");
const secretPath = join(secretDir, "token.txt");

/** Worker stderr, kept quiet (crash reports carry their own tail). */
const workerLog: string[] = [];
const quiet = { onStderr: (line: string) => void workerLog.push(line) };
/** What the workers may touch: the data directory, nothing else. */
const dataOnly = { read: [dataDir], write: [dataDir] };

const timings: [string, number][] = [];
let failures = 0;

function ms(start: number): string {
  return `${(performance.now() - start).toFixed(1)} ms`;
}

function say(text: string, start?: number): void {
  const time = start === undefined ? "" : `  (${ms(start)})`;
  console.log(`   ${text}${time}`);
}

function check(ok: boolean, claim: string): void {
  if (!ok) {
    failures++;
    console.log(`   !! not as claimed: ${claim}`);
  }
}

async function step(title: string, body: () => Promise<void>): Promise<void> {
  console.log(`\n${title}`);
  const start = performance.now();
  try {
    await body();
  } catch (error: unknown) {
    failures++;
    console.log(`   !! the step failed: ${String(error)}`);
  }
  timings.push([title, performance.now() - start]);
}

function names(rows: readonly Row[]): string {
  return rows.map((row) =>
    row.price === undefined
      ? String(row.name)
      : `${String(row.title)} ${Number(row.price).toFixed(2)}`
  ).join(", ");
}

function firstLine(error: unknown): string {
  const text = error instanceof Error
    ? `${error.name}: ${error.message}`
    : String(error);
  return text.split("\n")[0] ?? text;
}

/**
 * Replaces the data directory with a new database of schema 1
 * (`items(id, name)`) or 2 (`items(id, title, price)`). The new directory is
 * built beside the old one and renamed over it once the old one is deleted,
 * as a restore from a backup does. (A directory deleted and then recreated in
 * place may get its old inode number back, ext4 does this, and `watch`, which
 * compares device and inode, cannot tell the two apart.)
 */
function rebuild(schema: 1 | 2): void {
  const next = `${dataDir}.next`;
  rmSync(next, { recursive: true, force: true });
  mkdirSync(next);
  const db = new DatabaseSync(join(next, "app.db"));
  if (schema === 1) {
    db.exec(
      "create table items (id integer primary key, name text);" +
        "insert into items (name) values ('apple'), ('banana');",
    );
  } else {
    db.exec(
      "create table items (id integer primary key, title text, price real);" +
        "insert into items (title, price) values ('cherry', 3.5);",
    );
  }
  db.close();
  writeFileSync(join(next, "notes.txt"), `schema ${schema}\n`);
  rmSync(dataDir, { recursive: true, force: true });
  renameSync(next, dataDir);
}

console.log(`airlock demo on ${RUNTIME}, workers on the same runtime`);
console.log(`data directory: ${dataDir}`);
mkdirSync(secretDir);
writeFileSync(secretPath, "s3cr3t\n");
rebuild(1);

await step(
  "1. The problem: a client opened once, in this process",
  async () => {
    let start = performance.now();
    const client = new DatabaseSync(dbPath);
    const read = () =>
      client.prepare("select * from items order by id").all() as Row[];
    const before = read();
    say(`opened app.db here; items: ${names(before)}`, start);
    start = performance.now();
    rebuild(2);
    say(
      "wiped data/ and recreated it: items(id, title, price) = cherry",
      start,
    );
    start = performance.now();
    const after = read();
    say(`same client, same query: ${names(after)}   <- stale`, start);
    check(names(after) === names(before), "the in-process client is stale");
    try {
      client.prepare("select title from items").all();
      check(false, "a query on the new schema fails");
    } catch (error: unknown) {
      say(`query on the new schema: ${firstLine(error)}`);
    }
    try {
      client.prepare("insert into items (name) values ('date')").run();
      check(false, "a write fails");
    } catch (error: unknown) {
      say(`write: ${firstLine(error)}`);
    }
    client.close();
    await Promise.resolve();
  },
);

await step("2. oneShot: a fresh process per call", async () => {
  const fresh = oneShot<typeof db>(WORKER, {
    ...quiet,
    permissions: dataOnly,
  });
  let start = performance.now();
  const rows = await fresh.rows(dbPath);
  say(`read:  ${names(rows)}`, start);
  check(names(rows) === "cherry 3.50", "oneShot sees the new schema");
  start = performance.now();
  const id = await fresh.insert(dbPath, { title: "damson", price: 4.25 });
  say(`write: inserted damson as id ${id}`, start);
  start = performance.now();
  const written = await fresh.rows(dbPath);
  say(`read:  ${names(written)}`, start);
  check(names(written) === "cherry 3.50, damson 4.25", "the write is seen");
  rebuild(1);
  say("wiped and recreated data/ with the first schema again");
  start = performance.now();
  const again = await fresh.rows(dbPath);
  say(`read:  ${names(again)}`, start);
  check(names(again) === "apple, banana", "oneShot sees the wipe");
  const ids = [await fresh.whoami(), await fresh.whoami()];
  say(`two calls of whoami(): processes ${ids.join(" and ")}`);
  check(ids[0] !== ids[1], "each call runs in a new process");
});

await step(
  "3. session: one long-lived worker, restart() after a wipe",
  async () => {
    let start = performance.now();
    await using s = await session<typeof db>(WORKER, {
      ...quiet,
      permissions: dataOnly,
    });
    say(`session ready, worker pid ${s.pid}`, start);
    const first = await s.rows(dbPath);
    start = performance.now();
    const calls = 500;
    for (let i = 0; i < calls; i++) await s.rows(dbPath);
    const each = (performance.now() - start) / calls;
    say(
      `${calls} reads of ${names(first)}, ${each.toFixed(3)} ms per call`,
      start,
    );
    const pid = s.pid;
    rebuild(2);
    say("wiped and recreated data/ with the second schema");
    start = performance.now();
    const stale = await s.rows(dbPath);
    say(
      `read:  ${
        names(stale)
      }   <- stale: the worker's client predates the wipe`,
      start,
    );
    check(names(stale) === "apple, banana", "the long-lived worker is stale");
    start = performance.now();
    await s.restart();
    say(`restart(): new worker pid ${s.pid} (was ${pid})`, start);
    check(s.pid !== pid, "restart() gives a new process");
    start = performance.now();
    const fresh = await s.rows(dbPath);
    say(`read:  ${names(fresh)}`, start);
    check(
      names(fresh) === "cherry 3.50",
      "the restarted worker sees the new data",
    );
  },
);

await step("4. session with watch: the wipe is caught for you", async () => {
  let start = performance.now();
  await using s = await session<typeof db>(WORKER, {
    ...quiet,
    permissions: dataOnly,
    watch: [dataDir],
  });
  say(`session ready with watch: [data/], worker pid ${s.pid}`, start);
  const pid = s.pid;
  start = performance.now();
  say(`read:  ${names(await s.rows(dbPath))}`, start);
  rebuild(1);
  say("wiped and recreated data/ with the first schema");
  start = performance.now();
  const rows = await s.rows(dbPath);
  say(
    `read:  ${names(rows)}   (worker pid ${s.pid}, replaced before the call)`,
    start,
  );
  check(names(rows) === "apple, banana", "watch replaced the stale worker");
  check(s.pid !== pid, "the call ran on a new process");
  const stats = s.stats();
  say(
    `stats: recycledBy.watch ${stats.recycledBy.watch}, restarts ${stats.restarts}; no restart() by the caller`,
  );
  check(stats.recycledBy.watch === 1, "one replacement, caused by watch");
});

await step("5. Crash containment: a worker that dies hard", async () => {
  let start = performance.now();
  await using s = await session<typeof db>(WORKER, {
    ...quiet,
    permissions: { ...dataOnly, ffi: true },
  });
  say(`session ready, worker pid ${s.pid}`, start);
  for (const op of ["die", "segfault"] as const) {
    const pid = s.pid;
    start = performance.now();
    const error = await s[op]().then(() => undefined, (e: unknown) => e);
    check(
      error instanceof WorkerCrashedError,
      `${op}() is a WorkerCrashedError`,
    );
    if (error instanceof WorkerCrashedError) {
      say(
        `${op}(): ${error.name}, signal ${error.signal}, pid ${error.pid} (${error.hint})`,
        start,
      );
      say(`  message: ${firstLine(error)}`);
      check(error.pid === pid, "the error names the dead worker");
    }
    start = performance.now();
    const rows = await s.rows(dbPath);
    say(`next call: ${names(rows)} on a new worker, pid ${s.pid}`, start);
    check(s.pid !== pid, "the next call runs on a new process");
  }
  const stats = s.stats();
  say(`stats: crashed ${stats.crashed}, restarts ${stats.restarts}`);
  check(stats.crashed === 2, "two crashes counted");
});

await step(
  "6. Permission scope: read and write data/, nothing else",
  async () => {
    const scoped = oneShot<typeof db>(WORKER, {
      ...quiet,
      permissions: dataOnly,
    });
    say(
      `the parent reads ${secretPath}: ${
        readFileSync(secretPath, "utf8").trim()
      }`,
    );
    let start = performance.now();
    const inside = await scoped.readText(join(dataDir, "notes.txt"));
    say(`the worker reads data/notes.txt: ${inside.trim()}`, start);
    start = performance.now();
    const error = await scoped.readText(secretPath).then(
      () => undefined,
      (e: unknown) => e,
    );
    check(error instanceof RemoteError, "the read outside is refused");
    say(`the worker reads ${secretPath}:`, start);
    say(`  refused: ${firstLine(error)}`);
    if (error instanceof RemoteError && error.code !== undefined) {
      say(`  (RemoteError, code ${String(error.code)})`);
    }
    say(
      RUNTIME.startsWith("bun")
        ? "  (Bun has no permission model: bubblewrap shows the worker only data/, so the file is not there)"
        : "  (Deno's --allow-read=<data/> flag refused it)",
    );
  },
);

rmSync(root, { recursive: true, force: true });

console.log("\nTimings per step");
for (const [title, time] of timings) {
  console.log(`   ${time.toFixed(0).padStart(6)} ms  ${title}`);
}
if (failures > 0) {
  console.log(`\n${failures} claim(s) did not hold`);
  process.exit(1);
}
console.log("\nEvery claim held.");
