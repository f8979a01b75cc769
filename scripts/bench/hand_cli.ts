/**
 * The baseline of issue 23's CLI scenario: the same CLI as
 * `first_start.ts` without airlock, spawning a hand-written stdin/stdout
 * worker (`hand_worker.ts`) on the same runtime, asking it one sum and
 * exiting once it has exited.
 *
 * @module
 */

import { spawn } from "node:child_process";
import process from "node:process";

const script = new URL("./hand_worker.ts", import.meta.url).pathname;
const bun = (globalThis as { Bun?: unknown }).Bun !== undefined;
const child = spawn(
  process.execPath,
  bun ? [script] : ["run", "--quiet", script],
  { stdio: ["pipe", "pipe", "inherit"] },
);
let out = "";
child.stdout.setEncoding("utf8");
child.stdout.on("data", (chunk: string) => out += chunk);
child.stdin.end("1 2\n");
const code = await new Promise<number | null>((resolve) =>
  child.on("close", resolve)
);
if (code !== 0 || out.trim() !== "3") {
  throw new Error(`hand worker: exit ${code}, said "${out.trim()}"`);
}
