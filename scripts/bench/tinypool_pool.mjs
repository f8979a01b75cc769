// deno-lint-ignore-file no-console
/**
 * Reference for (f): tinypool with its `child_process` runtime and two
 * workers, run under Node: the same trivial calls as airlock's pool, all
 * submitted at once. Prints one JSON line.
 *
 *   node tinypool_pool.mjs '{"warmup":200,"calls":1000}'
 *
 * @module
 */

import process from "node:process";
import Tinypool from "tinypool";

const config = JSON.parse(process.argv[2] ?? "{}");
const pool = new Tinypool({
  filename: new URL("./tinypool_task.mjs", import.meta.url).href,
  runtime: "child_process",
  minThreads: 2,
  maxThreads: 2,
});

async function batch(count) {
  const latencies = new Array(count);
  const start = performance.now();
  await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const value = await pool.run(i);
      if (value !== i + 1) throw new Error("the result did not match");
      latencies[i] = performance.now() - start;
    }),
  );
  return { totalMs: performance.now() - start, latencies };
}

try {
  await batch(config.warmup ?? 200);
  const { totalMs, latencies } = await batch(config.calls ?? 1000);
  latencies.sort((a, b) => a - b);
  const p99 = latencies[Math.ceil(0.99 * latencies.length) - 1];
  console.log(JSON.stringify({ totalMs, p99Ms: p99 }));
} finally {
  await pool.destroy();
}
