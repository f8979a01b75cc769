// The worker of the compiled test program: reports what process it runs in.
// Not a test file.
import { readFileSync } from "node:fs";
import process from "node:process";
import { defineWorker } from "../../../../worker.ts";

export default defineWorker({
  /** Where and how this worker runs. */
  info() {
    return {
      pid: process.pid,
      execPath: process.execPath,
      url: import.meta.url,
      greeting: process.env.GREETING ?? null,
      bunBeBun: process.env.BUN_BE_BUN ?? null,
      marker: process.env.AIRLOCK_WORKER_MODULE ?? null,
    };
  },
  /** Reads a text file. */
  readText(path: string): string {
    return readFileSync(path, "utf8");
  },
  /** Dies at once. */
  die(): never {
    process.kill(process.pid, "SIGKILL");
    throw new Error("unreachable");
  },
});
