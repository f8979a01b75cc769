// deno-lint-ignore-file no-console
/**
 * A streamed export from a real client: 500,000 rows of node:sqlite, read by
 * a worker with a statement iterator and written by the parent to an NDJSON
 * file, row by row, with back-pressure end to end. Memory stays flat on both
 * sides; the same export returned as one array does not. Exits 1 if a claim
 * does not hold.
 *
 * ```sh
 * deno run -A main.ts   # or: bun main.ts
 * ```
 *
 * @module
 */

import { createWriteStream, mkdtempSync, rmSync, statSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { session } from "../../mod.ts";
import type exporter from "./export_worker.ts";

const ROWS = 500_000;
const MiB = 1024 * 1024;
const dir = mkdtempSync(join(tmpdir(), "airlock-export-"));
const dbPath = join(dir, "events.db");
const outPath = join(dir, "events.ndjson");

function check(condition: boolean, claim: string): void {
  if (!condition) {
    console.error(`claim does not hold: ${claim}`);
    process.exit(1);
  }
}

const mib = (bytes: number) => `${(bytes / MiB).toFixed(0)} MiB`;

try {
  await using s = await session<typeof exporter>(
    new URL("./export_worker.ts", import.meta.url),
    { permissions: { read: [dir], write: [dir] } },
  );
  let reported = 0;
  await s.call("fill", [dbPath, ROWS], {
    onProgress: (done) => void (reported = done as number),
  });
  check(reported === ROWS, "the last progress report is the last row");
  console.log(
    `filled ${ROWS} rows (${
      mib(statSync(dbPath).size)
    } on disk), progress reported up to ${reported}`,
  );

  // The streamed export: the worker reads with a cursor, the parent writes
  // each row; neither holds more than the window (1024 rows, 4 MiB).
  const out = createWriteStream(outPath);
  const base = { parent: process.memoryUsage().rss, worker: await s.rss() };
  const peak = { ...base };
  let written = 0;
  const started = performance.now();
  for await (const row of s.events(dbPath)) {
    if (!out.write(`${JSON.stringify(row)}\n`)) await once(out, "drain");
    written++;
    if (written % 50_000 === 0) {
      peak.parent = Math.max(peak.parent, process.memoryUsage().rss);
      peak.worker = Math.max(peak.worker, await s.rss());
    }
  }
  out.end();
  await once(out, "finish");
  const seconds = (performance.now() - started) / 1000;
  check(written === ROWS, "every row was exported");
  console.log(
    `streamed ${written} rows to ${mib(statSync(outPath).size)} of NDJSON in ${
      seconds.toFixed(1)
    } s (${(written / seconds / 1000).toFixed(0)}k rows/s)`,
  );
  console.log(
    `  parent RSS ${mib(base.parent)} -> peak ${mib(peak.parent)}, worker RSS ${
      mib(base.worker)
    } -> peak ${mib(peak.worker)}`,
  );

  // The same rows returned as one array, for comparison.
  const all = await s.allEvents(dbPath);
  check(all.length === ROWS, "the array holds every row");
  const arrayParent = process.memoryUsage().rss;
  const arrayWorker = await s.rss();
  console.log(
    `one array of the same rows: parent RSS ${mib(arrayParent)}, worker RSS ${
      mib(arrayWorker)
    }`,
  );
  check(
    peak.parent - base.parent < 64 * MiB &&
      peak.worker - base.worker < 64 * MiB,
    "the streamed export grows neither process by 64 MiB",
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
