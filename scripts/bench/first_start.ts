// deno-lint-ignore-file no-console
/**
 * Issue 23's CLI scenario and stall row: a program that imports airlock,
 * makes one `oneShot` call (the parent's first start: probes, command
 * build, spawn) and exits. A 1 ms timer runs from the call (after the
 * import) to the answer; the longest gap between its firings (the parent's
 * longest event-loop stall during its first start) is printed on stdout as
 * `{"stallMs": …}`. The driver times the whole process from spawn to exit
 * and compares it with `hand_cli.ts`.
 *
 * It touches no Node built-in before the call: on Deno, whatever first
 * touches Node compatibility starts it, one block of some 20 to 35 ms, and
 * the start is what does here. With the argument `node-loaded` it imports
 * `node:process` first, as a program already using Node compatibility (any
 * npm package) has.
 *
 * @module
 */

const runtime = globalThis as {
  Deno?: { args: string[]; env: { get(name: string): string | undefined } };
  Bun?: { argv: string[]; env: Record<string, string | undefined> };
};
const args = runtime.Deno?.args ?? runtime.Bun?.argv.slice(2) ?? [];
if (args.includes("node-loaded")) await import("node:process");
const { oneShot } = await import("../../mod.ts");
const marker = runtime.Deno?.env.get("AIRLOCK_BENCH_RUN") ??
  runtime.Bun?.env.AIRLOCK_BENCH_RUN;
let last = performance.now();
let worst = 0;
const timer = setInterval(() => {
  const now = performance.now();
  worst = Math.max(worst, now - last);
  last = now;
}, 1);
const worker = oneShot<typeof import("./bench_worker.ts").default>(
  new URL("./bench_worker.ts", import.meta.url),
  // The driver's marker, so its check that no process is left sees it.
  marker === undefined ? {} : { env: { AIRLOCK_BENCH_RUN: marker } },
);
if (await worker.add(1, 2) !== 3) throw new Error("wrong answer");
clearInterval(timer);
console.log(JSON.stringify({ stallMs: worst }));
