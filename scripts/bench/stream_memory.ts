// deno-lint-ignore-file no-console
/**
 * Streams 1 GiB (16,384 buffers of 64 KiB) from a session to a consumer that
 * is slower than the producer (it waits 1 ms after each buffer), and samples
 * the resident memory of both processes every 100 ms. Back-pressure holds
 * the worker to the call's window (4 MiB by default), so both peaks stay
 * flat however long the stream is. Prints one JSON line:
 *
 * ```sh
 * node_modules/.bin/deno run -A scripts/bench/stream_memory.ts
 * node_modules/.bin/bun scripts/bench/stream_memory.ts
 * node_modules/.bin/deno run -A scripts/bench/stream_memory.ts --mib=256 --window-mib=1
 * ```
 *
 * @module
 */

import process from "node:process";
import { session } from "../../mod.ts";
import { readRssBytes } from "../../src/runtime/proc.ts";

const arg = (name: string, fallback: number): number => {
  const found = process.argv.find((a) => a.startsWith(`--${name}=`));
  return found ? Number(found.slice(name.length + 3)) : fallback;
};
const MiB = 1024 * 1024;
const totalMiB = arg("mib", 1024);
const windowMiB = arg("window-mib", 4);
const chunkBytes = 64 * 1024;
const count = (totalMiB * MiB) / chunkBytes;

const s = await session<typeof import("./bench_worker.ts").default>(
  new URL("./bench_worker.ts", import.meta.url),
  { permissions: "all" },
);
try {
  const parentRss = () => readRssBytes(process.pid) ?? 0;
  const workerRss = () => s.stats().rssBytes ?? 0;
  // Warm both sides up, then take the baseline.
  for await (const _ of s.chunks(64, chunkBytes)) { /* warm-up */ }
  const base = { parent: parentRss(), worker: workerRss() };
  const peak = { ...base };
  const sample = () => {
    peak.parent = Math.max(peak.parent, parentRss());
    peak.worker = Math.max(peak.worker, workerRss());
  };
  const timer = setInterval(sample, 100);
  const started = performance.now();
  let received = 0;
  let bytes = 0;
  for await (
    const chunk of s.stream("chunks", [count, chunkBytes], {
      windowBytes: windowMiB * MiB,
    })
  ) {
    if (chunk[0] !== (received & 0xff)) throw new Error("out of order");
    received++;
    bytes += chunk.byteLength;
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
  clearInterval(timer);
  sample();
  const seconds = (performance.now() - started) / 1000;
  console.log(JSON.stringify({
    runtime: "Bun" in globalThis ? "bun" : "deno",
    streamedMiB: bytes / MiB,
    windowMiB,
    seconds: Number(seconds.toFixed(1)),
    parentBaseMiB: Number((base.parent / MiB).toFixed(1)),
    parentPeakMiB: Number((peak.parent / MiB).toFixed(1)),
    workerBaseMiB: Number((base.worker / MiB).toFixed(1)),
    workerPeakMiB: Number((peak.worker / MiB).toFixed(1)),
  }));
} finally {
  await s.close();
}
