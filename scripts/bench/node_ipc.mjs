// deno-lint-ignore-file no-console
/**
 * Reference: Node's `child_process.fork` IPC, run under Node. Prints one JSON
 * line.
 *
 *   node node_ipc.mjs '{"scenario":"rtt","serialization":"json","warmup":100,"iterations":1000}'
 *   node node_ipc.mjs '{"scenario":"throughput","serialization":"advanced","warmup":100,"iterations":1000,"inflight":64}'
 *
 * @module
 */

import { fork } from "node:child_process";
import process from "node:process";

const config = JSON.parse(process.argv[2] ?? "{}");
const child = fork(new URL("./ipc_echo.mjs", import.meta.url), [], {
  serialization: config.serialization ?? "json",
  stdio: ["ignore", "ignore", "inherit", "ipc"],
});

const waiting = new Map();
child.on("message", (message) => {
  const resolve = waiting.get(message.id);
  waiting.delete(message.id);
  resolve?.(message);
});

let nextId = 1;
function call() {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    waiting.set(id, (message) => {
      if (message.op !== "add" || message.args[0] !== id) {
        reject(new Error("the echo did not match"));
      } else resolve(message);
    });
    child.send({ id, op: "add", args: [id, 1] });
  });
}

function summarize(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q) =>
    sorted[
      Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))
    ];
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return { p50: at(0.5) * 1000, p99: at(0.99) * 1000, mean: mean * 1000 };
}

async function rtt() {
  for (let i = 0; i < config.warmup; i++) await call();
  const samples = [];
  for (let i = 0; i < config.iterations; i++) {
    const start = performance.now();
    await call();
    samples.push(performance.now() - start);
  }
  return summarize(samples);
}

async function throughput(total) {
  const inflight = config.inflight ?? 64;
  let issued = 0;
  const start = performance.now();
  const lane = async () => {
    while (issued < total) {
      issued++;
      await call();
    }
  };
  await Promise.all(Array.from({ length: inflight }, lane));
  return total / ((performance.now() - start) / 1000);
}

try {
  if (config.scenario === "throughput") {
    await throughput(config.warmup);
    console.log(
      JSON.stringify({ callsPerSecond: await throughput(config.iterations) }),
    );
  } else {
    console.log(JSON.stringify(await rtt()));
  }
} finally {
  child.disconnect();
  child.kill();
}
