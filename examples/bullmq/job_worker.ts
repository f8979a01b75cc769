/**
 * The airlock worker that runs each BullMQ job (`main.ts`). `apply` has an
 * effect keyed by the job's id: it creates `<dir>/<jobId>` exclusively, so
 * a second run of the same job finds it done and changes nothing (the job
 * is idempotent, and declared so). Every run, first or not, is appended to
 * `<dir>/runs.log`. In your project, import `defineWorker` from
 * `@airlock/airlock/worker`.
 *
 * @module
 */

import { appendFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import { defineWorker } from "../../worker.ts";

export default defineWorker({
  /** Applies job `jobId` once; returns whether this run applied it. */
  apply(dir: string, jobId: string, value: number): boolean {
    appendFileSync(`${dir}/runs.log`, `${jobId} ${process.pid}\n`);
    try {
      writeFileSync(`${dir}/${jobId}`, String(value * 2), { flag: "wx" });
      return true;
    } catch (error: unknown) {
      if ((error as { code?: string }).code === "EEXIST") return false;
      throw error;
    }
  },
}, { idempotent: ["apply"] });
