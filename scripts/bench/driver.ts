// deno-lint-ignore-file no-console
/**
 * One measurement, in a fresh process of the runtime under test (Deno or
 * Bun): `driver.ts '<json>'` runs one scenario for one contender, warms up,
 * checks every echoed value, and prints one JSON line. `main.ts` calls it
 * round after round, alternating contenders, and takes medians.
 *
 * @module
 */

import superjson from "superjson";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tracingChannel } from "node:diagnostics_channel";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { oneShot, pool, session } from "../../mod.ts";
import { DIAGNOSTICS_CHANNELS } from "../../diagnostics.ts";
import {
  traceAttempt,
  traceEnd,
  traceStart,
} from "../../src/parent/_events.ts";
import { CallMetrics } from "../../src/parent/_metrics.ts";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import { encodeValue } from "../../src/protocol/encode_value.ts";
import { FloorClient } from "./_floor_client.ts";
import { withoutLimitsStep, wrappedBareCommand } from "./_wrapped_bare.ts";
import { cgroupBackend } from "../../src/runtime/sandbox/limits/open_cgroups.ts";
import { detect } from "../../src/runtime/detect.ts";
import type netWorker from "./net_worker.ts";
import {
  cpuMs,
  envVar,
  execPath,
  exit,
  type PipedChild,
  rssBytes,
  runQuiet,
  runtimeName,
  scriptArgs,
  scriptArgv,
  spawnPiped,
} from "./_runtime.ts";
import { median, quantile, summarize } from "./_stats.ts";

/** What main.ts asks for. */
export interface DriverConfig {
  /** Which scenario. */
  scenario:
    | "rtt"
    | "throughput"
    | "binary"
    | "rich"
    | "start"
    | "pool"
    | "memory"
    | "import"
    | "cli"
    | "stream"
    | "events"
    | "net";
  /** Which contender (scenario-specific). */
  contender: string;
  /** Calls before measuring. */
  warmup: number;
  /** Calls (or repetitions) measured. */
  iterations: number;
  /** Calls in flight, for throughput. */
  inflight?: number;
  /** Payload sizes in MiB, for binary. */
  sizesMiB?: number[];
  /** MiB echoed per bulk run, for net. */
  bytesMiB?: number;
  /** Rows of the rich payload. */
  rows?: number;
  /** maxTasksPerWorker for the pool (0: off). */
  maxTasksPerWorker?: number;
  /** Calls one pool worker runs at once. */
  concurrency?: number;
  /**
   * Issue the pool's calls one every this many ms instead of all at once,
   * and take each call's own latency (0: a burst, latency since it began).
   */
  paceMs?: number;
  /** Grant the one-shot worker everything (no OS sandbox on Bun). */
  permissionsAll?: boolean;
  /** oneShot spares for the start scenario (0: none). */
  spares?: number;
  /** Give the one-shot worker every limit (the start scenario's limits row). */
  limits?: boolean;
  /**
   * Move the answering process (all its threads) to core 1; main.ts starts
   * this one on core 0.
   */
  split?: boolean;
}

const here = new URL(".", import.meta.url);
const workerUrl = new URL("./bench_worker.ts", here);
const scriptPath = (name: string): string => new URL(name, here).pathname;
/** Marks every process a run starts, so main.ts can prove none is left. */
const marker = envVar("AIRLOCK_BENCH_RUN") ?? "manual";
const workerEnv = { AIRLOCK_BENCH_RUN: marker };

function check(condition: boolean, what: string): void {
  if (!condition) throw new Error(`Benchmark check failed: ${what}`);
}

function floorChild(mode = "sync"): PipedChild {
  return spawnPiped(
    scriptArgv(scriptPath("floor_worker.ts"), [mode]),
    workerEnv,
  );
}

const smallPayload = new TextEncoder().encode(
  JSON.stringify({ id: 1, op: "add", args: [1, 2] }),
);

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  const words = a.byteLength >> 2;
  if (a.byteOffset % 4 === 0 && b.byteOffset % 4 === 0) {
    const x = new Uint32Array(a.buffer, a.byteOffset, words);
    const y = new Uint32Array(b.buffer, b.byteOffset, words);
    for (let i = 0; i < words; i++) if (x[i] !== y[i]) return false;
    for (let i = words * 4; i < a.byteLength; i++) {
      if (a[i] !== b[i]) return false;
    }
    return true;
  }
  for (let i = 0; i < a.byteLength; i++) if (a[i] !== b[i]) return false;
  return true;
}

// ---------------------------------------------------------------- IPC (Bun)

interface BunIpcChild {
  readonly pid: number;
  send(message: unknown): void;
  kill(): void;
  disconnect(): void;
  readonly exited: Promise<number>;
}
interface BunIpcSpawn {
  spawn(
    argv: string[],
    options: {
      ipc(message: unknown): void;
      serialization: "json" | "advanced";
      stdio: ["ignore", "ignore", "inherit"];
    },
  ): BunIpcChild;
}

interface AddMessage {
  id: number;
  op: string;
  args: [number, number];
}

/** A request/answer channel over `Bun.spawn` IPC. */
function bunIpc(serialization: "json" | "advanced"): {
  call(): Promise<void>;
  close(): Promise<void>;
  pid: number;
} {
  const bun = (globalThis as unknown as { Bun: BunIpcSpawn }).Bun;
  const waiting = new Map<number, (message: AddMessage) => void>();
  const child = bun.spawn([execPath(), scriptPath("ipc_echo.mjs")], {
    ipc(message) {
      const answer = message as AddMessage;
      const resolve = waiting.get(answer.id);
      waiting.delete(answer.id);
      resolve?.(answer);
    },
    serialization,
    stdio: ["ignore", "ignore", "inherit"],
  });
  let nextId = 1;
  return {
    pid: child.pid,
    call() {
      const id = nextId++;
      return new Promise<void>((resolve, reject) => {
        waiting.set(id, (answer) => {
          if (answer.op !== "add" || answer.args[0] !== id) {
            reject(new Error("Benchmark check failed: the IPC echo"));
          } else resolve();
        });
        child.send({ id, op: "add", args: [id, 1] });
      });
    },
    async close() {
      child.disconnect();
      child.kill();
      await child.exited;
    },
  };
}

// ------------------------------------------------------------------ helpers

interface Caller {
  /** One trivial call, checked. */
  call(i: number): Promise<void>;
  close(): Promise<void>;
  /** The pid of the process answering, for its CPU time. */
  pid(): number | undefined;
}

async function caller(contender: string): Promise<Caller> {
  switch (contender) {
    case "airlock":
    case "airlock-watch": {
      let dir: string | undefined;
      const watch: string[] = [];
      if (contender === "airlock-watch") {
        dir = mkdtempSync(join(tmpdir(), "airlock-bench-"));
        const file = join(dir, "state.db");
        writeFileSync(file, "state");
        watch.push(file);
      }
      const s = await session<typeof import("./bench_worker.ts").default>(
        workerUrl,
        { env: workerEnv, watch },
      );
      return {
        async call(i) {
          const value = await s.add(i, 1);
          if (value !== i + 1) check(false, `add(${i}, 1) gave ${value}`);
        },
        async close() {
          await s.close();
          if (dir) rmSync(dir, { recursive: true, force: true });
        },
        pid: () => s.pid,
      };
    }
    case "floor":
    case "floor-async": {
      const child = floorChild(contender === "floor" ? "sync" : "async");
      const client = new FloorClient(child);
      return {
        pid: () => child.pid,
        async call() {
          const echoed = await client.request(smallPayload);
          if (!sameBytes(echoed, smallPayload)) check(false, "the floor echo");
        },
        close: () => client.close(),
      };
    }
    case "bun-ipc-json":
    case "bun-ipc-advanced": {
      const ipc = bunIpc(contender === "bun-ipc-json" ? "json" : "advanced");
      return {
        call: () => ipc.call(),
        close: () => ipc.close(),
        pid: () => ipc.pid,
      };
    }
    default:
      throw new Error(`Unknown contender "${contender}"`);
  }
}

// ---------------------------------------------------------------- scenarios

/**
 * Starts counting CPU time of this process and of the answering one; the
 * returned function gives both per call, in µs, for the calls made since.
 */
function cpuMeter(
  pid: number | undefined,
): (calls: number) => { parentCpuUs: number; workerCpuUs: number } {
  const parent = cpuMs("self");
  const worker = pid === undefined ? NaN : cpuMs(pid);
  return (calls) => ({
    parentCpuUs: ((cpuMs("self") - parent) * 1000) / calls,
    workerCpuUs: pid === undefined
      ? NaN
      : ((cpuMs(pid) - worker) * 1000) / calls,
  });
}

/** Pins every thread of a process to one core (`taskset -a -p`). */
function moveToCore(pid: number | undefined, core: number): void {
  if (pid === undefined) throw new Error("Cannot pin: no pid");
  const result = spawnSync("taskset", [
    "-a",
    "-p",
    "-c",
    String(core),
    String(pid),
  ], {
    stdio: "ignore",
  });
  check(result.status === 0, `taskset moved pid ${pid} to core ${core}`);
}

async function rtt(config: DriverConfig): Promise<unknown> {
  const c = await caller(config.contender);
  if (config.split) moveToCore(c.pid(), 1);
  try {
    for (let i = 0; i < config.warmup; i++) await c.call(i);
    const samples: number[] = [];
    const cpu = cpuMeter(c.pid());
    for (let i = 0; i < config.iterations; i++) {
      const start = performance.now();
      await c.call(i);
      samples.push(performance.now() - start);
    }
    return { ...summarize(samples), ...cpu(config.iterations) };
  } finally {
    await c.close();
  }
}

async function throughput(config: DriverConfig): Promise<unknown> {
  const c = await caller(config.contender);
  const inflight = config.inflight ?? 64;
  const runFor = async (total: number): Promise<number> => {
    let issued = 0;
    const start = performance.now();
    const lane = async (): Promise<void> => {
      while (issued < total) await c.call(issued++);
    };
    await Promise.all(Array.from({ length: inflight }, lane));
    return total / ((performance.now() - start) / 1000);
  };
  try {
    await runFor(config.warmup);
    const cpu = cpuMeter(c.pid());
    const callsPerSecond = await runFor(config.iterations);
    return { callsPerSecond, ...cpu(config.iterations) };
  } finally {
    await c.close();
  }
}

function randomBytes(size: number): Uint8Array {
  const bytes = new Uint8Array(size);
  // Cheap, non-constant content: a counter pattern with a random seed.
  const words = new Uint32Array(bytes.buffer, 0, size >> 2);
  let x = (Math.random() * 0xffffffff) >>> 0;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  return bytes;
}

/** Reads a child's stdout to the end; returns the bytes seen. */
async function drain(stream: ReadableStream<Uint8Array>): Promise<number> {
  let total = 0;
  const reader = stream.getReader();
  while (true) {
    const { value, done } = await reader.read();
    if (done) return total;
    total += value.byteLength;
  }
}

async function binary(config: DriverConfig): Promise<unknown> {
  const sizes = config.sizesMiB ?? [1];
  const result: Record<string, number> = {};
  if (config.contender === "pipe-read") {
    // The runtime's raw pipe read rate: a child (head) writes, we read.
    for (const mib of sizes) {
      const bytes = mib * 1024 * 1024;
      const rates: number[] = [];
      for (let i = -config.warmup; i < config.iterations; i++) {
        const start = performance.now();
        const child = spawnPiped(["head", "-c", String(bytes), "/dev/zero"]);
        void child.closeStdin().catch(() => {});
        const seen = await drain(child.stdout);
        const ms = performance.now() - start;
        await child.exited;
        check(seen === bytes, `pipe read of ${bytes} bytes saw ${seen}`);
        if (i >= 0) rates.push(bytes / 1e6 / (ms / 1000));
      }
      result[`${mib}MiB`] = median(rates);
    }
    return result;
  }
  let send: (bytes: Uint8Array) => Promise<Uint8Array>;
  let close: () => Promise<void>;
  if (config.contender === "airlock") {
    const s = await session<typeof import("./bench_worker.ts").default>(
      workerUrl,
      { env: workerEnv },
    );
    send = (bytes) => s.echo(bytes) as Promise<Uint8Array>;
    close = () => s.close();
  } else if (config.contender === "floor") {
    const client = new FloorClient(floorChild());
    send = (bytes) => client.request(bytes);
    close = () => client.close();
  } else {
    throw new Error(`Unknown contender "${config.contender}"`);
  }
  try {
    for (const mib of sizes) {
      const bytes = randomBytes(mib * 1024 * 1024);
      const rates: number[] = [];
      // Large sizes repeat less: about 64 MiB moved per measurement.
      const repeat = Math.max(1, Math.min(config.iterations, 64 / mib));
      const warm = Math.max(1, Math.min(config.warmup, 16 / mib));
      for (let i = -warm; i < repeat; i++) {
        const start = performance.now();
        const echoed = await send(bytes);
        const ms = performance.now() - start;
        check(
          echoed instanceof Uint8Array && sameBytes(echoed, bytes),
          `the echo of ${mib} MiB`,
        );
        // Bytes moved through the pipes, both ways, per second.
        if (i >= 0) rates.push((2 * bytes.byteLength) / 1e6 / (ms / 1000));
      }
      result[`${mib}MiB`] = median(rates);
    }
    return result;
  } finally {
    await close();
  }
}

interface Row {
  id: number;
  at: Date;
  tags: Map<string, number>;
  big: bigint;
  nested: unknown[];
}

function makeRows(count: number): Row[] {
  const rows: Row[] = [];
  for (let i = 0; i < count; i++) {
    rows.push({
      id: i,
      at: new Date(1_700_000_000_000 + i),
      tags: new Map([["a", i], ["b", 2]]),
      big: 12345678901234567890n + BigInt(i),
      nested: [[1, 2, [3, `x${i}`]], [true, null]],
    });
  }
  return rows;
}

function checkRows(value: unknown, count: number): void {
  check(Array.isArray(value) && value.length === count, "row count");
  const rows = value as Row[];
  for (const i of [0, count >> 1, count - 1]) {
    const row = rows[i] as Row;
    check(
      row.id === i && row.at instanceof Date &&
        row.at.getTime() === 1_700_000_000_000 + i &&
        row.tags instanceof Map && row.tags.get("a") === i &&
        row.big === 12345678901234567890n + BigInt(i) &&
        JSON.stringify(row.nested) ===
          JSON.stringify([[1, 2, [3, `x${i}`]], [true, null]]),
      `row ${i} came back intact`,
    );
  }
}

async function rich(config: DriverConfig): Promise<unknown> {
  const count = config.rows ?? 1000;
  const rows = makeRows(count);
  let once: () => Promise<unknown> | unknown;
  let close = async (): Promise<void> => {};
  switch (config.contender) {
    case "airlock": {
      const s = await session<typeof import("./bench_worker.ts").default>(
        workerUrl,
        { env: workerEnv },
      );
      once = () => s.echo(rows);
      close = () => s.close();
      break;
    }
    case "superjson":
      once = () => superjson.parse(superjson.stringify(rows));
      break;
    case "codec":
      once = () => {
        const { head, attachments } = encodeValue(rows);
        check(attachments.length === 0, "no attachments");
        return decodeValue(head, new Uint8Array(0));
      };
      break;
    default:
      throw new Error(`Unknown contender "${config.contender}"`);
  }
  try {
    const samples: number[] = [];
    for (let i = -config.warmup; i < config.iterations; i++) {
      const start = performance.now();
      const value = await once();
      const ms = performance.now() - start;
      checkRows(value, count);
      if (i >= 0) samples.push(ms);
    }
    return { ms: median(samples) };
  } finally {
    await close();
  }
}

/** `deno run x` or `bun run x`: a bare start of the runtime. */
function bareArgv(script: string): string[] {
  return [execPath(), "run", scriptPath(script)];
}

async function start(config: DriverConfig): Promise<unknown> {
  const options = {
    env: workerEnv,
    ...(config.permissionsAll ? { permissions: "all" as const } : {}),
    ...(config.limits
      ? {
        limits: {
          memoryBytes: 512 * 2 ** 20,
          processes: 64,
          cpuSeconds: 600,
          fileSizeBytes: 2 ** 30,
          openFiles: 1024,
        },
      }
      : {}),
  };
  const runner = oneShot<typeof import("./bench_worker.ts").default>(
    workerUrl,
    { ...options, spares: config.spares ?? 0 },
  );
  // The target's baseline: the same runtime started bare under the same
  // wrappers (setpriv, the OS sandbox) as the worker; the unwrapped bare
  // start is reported beside it.
  const wrapped = await wrappedBareCommand(
    workerUrl,
    options,
    scriptPath("empty.ts"),
  );
  // The same bare start without the limits step (cgroups, rlimits,
  // oom_score_adj), and the parent's part: a group made and removed.
  const unlimited = withoutLimitsStep(wrapped.argv);
  const backend = cgroupBackend(detect().name);
  const bare: number[] = [];
  const bareWrapped: number[] = [];
  const bareUnlimited: number[] = [];
  const groups: number[] = [];
  const one: number[] = [];
  for (let i = -config.warmup; i < config.iterations; i++) {
    let t = performance.now();
    check(await runQuiet(bareArgv("empty.ts")) === 0, "empty.ts exits 0");
    const bareMs = performance.now() - t;
    t = performance.now();
    check(
      await runQuiet(wrapped.argv, wrapped.env, wrapped.extraInput) === 0,
      `a bare start under ${wrapped.wrappers.join(", ")} exits 0`,
    );
    const wrappedMs = performance.now() - t;
    t = performance.now();
    check(
      await runQuiet(unlimited, wrapped.env, wrapped.extraInput) === 0,
      "a bare start without the limits step exits 0",
    );
    const unlimitedMs = performance.now() - t;
    t = performance.now();
    if (!("error" in backend)) {
      backend.create({
        memoryBytes: config.limits ? 512 * 2 ** 20 : undefined,
        processes: config.limits ? 64 : 512,
      }).remove();
    }
    const groupMs = performance.now() - t;
    t = performance.now();
    check(await runner.add(i, 1) === i + 1, "one-shot add");
    const oneMs = performance.now() - t;
    if (i >= 0) {
      bare.push(bareMs);
      bareWrapped.push(wrappedMs);
      bareUnlimited.push(unlimitedMs);
      groups.push(groupMs);
      one.push(oneMs);
    }
  }
  await runner.close();
  wrapped.release();
  return {
    oneShotMs: median(one),
    bareMs: median(bareWrapped),
    bareUnwrappedMs: median(bare),
    bareNoLimitsMs: median(bareUnlimited),
    cgroupMs: "error" in backend ? undefined : median(groups),
  };
}

async function poolRun(config: DriverConfig): Promise<unknown> {
  const p = pool<typeof import("./bench_worker.ts").default>(workerUrl, {
    env: workerEnv,
    max: 2,
    min: 2,
    prewarm: 2,
    maxTasksPerWorker: config.maxTasksPerWorker ?? 0,
    concurrency: config.concurrency ?? 1,
  });
  const batch = async (count: number) => {
    const latencies: number[] = new Array(count);
    const begin = performance.now();
    await Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const value = await p.add(i, 1);
        if (value !== i + 1) check(false, `pool add(${i}, 1) gave ${value}`);
        latencies[i] = performance.now() - begin;
      }),
    );
    return { totalMs: performance.now() - begin, latencies };
  };
  // Paced: one call every `paceMs`, each timed from its own issue, so a
  // start that delays a call shows in that call's latency (a burst's
  // latencies are completion times of one batch, bound by total CPU).
  const paced = async (count: number, paceMs: number) => {
    const latencies: number[] = [];
    const begin = performance.now();
    const calls: Promise<void>[] = [];
    for (let i = 0; i < count; i++) {
      const issued = performance.now();
      calls.push(
        p.add(i, 1).then((value) => {
          if (value !== i + 1) check(false, `pool add(${i}, 1) gave ${value}`);
          latencies.push(performance.now() - issued);
        }),
      );
      const next = begin + (i + 1) * paceMs;
      await delay(Math.max(0, next - performance.now()));
    }
    await Promise.all(calls);
    return { totalMs: performance.now() - begin, latencies };
  };
  const run = (count: number) =>
    config.paceMs ? paced(count, config.paceMs) : batch(count);
  try {
    await run(config.warmup);
    const { totalMs, latencies } = await run(config.iterations);
    latencies.sort((a, b) => a - b);
    return {
      totalMs,
      p99Ms: quantile(latencies, 0.99),
      recycled: p.stats().recycled,
    };
  } finally {
    await p.close();
  }
}

async function firstLine(stream: ReadableStream<Uint8Array>): Promise<void> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("idle.ts ended before it was ready");
    text += decoder.decode(value, { stream: true });
  }
  reader.releaseLock();
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The parent pid of a process, from /proc. */
function parentPid(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
  } catch {
    return 0;
  }
}

/**
 * Resident memory of the processes between this one and a worker (a
 * sandbox wrapper such as bwrap); 0 when the worker is a direct child.
 */
function wrapperRss(workerPid: number): number {
  const self = Number(readFileSync("/proc/self/stat", "utf8").split(" ")[0]);
  let total = 0;
  let pid = parentPid(workerPid);
  for (let hops = 0; pid > 1 && pid !== self && hops < 8; hops++) {
    total += rssBytes(pid) || 0;
    pid = parentPid(pid);
  }
  return total;
}

async function memory(): Promise<unknown> {
  const settleMs = 500;
  const s = await session<typeof import("./bench_worker.ts").default>(
    workerUrl,
    { env: workerEnv },
  );
  let workerBytes: number;
  let wrapperBytes: number;
  try {
    check(await s.add(1, 2) === 3, "add(1, 2)");
    await delay(settleMs);
    workerBytes = rssBytes(s.pid as number);
    wrapperBytes = wrapperRss(s.pid as number);
  } finally {
    await s.close();
  }
  const bare = spawnPiped(bareArgv("idle.ts"), workerEnv);
  let bareBytes: number;
  try {
    await firstLine(bare.stdout);
    await delay(settleMs);
    bareBytes = rssBytes(bare.pid);
  } finally {
    bare.kill();
    await bare.exited;
  }
  return {
    workerMiB: workerBytes / 1048576,
    bareMiB: bareBytes / 1048576,
    wrapperMiB: wrapperBytes / 1048576,
  };
}

/**
 * Small rows from a session: streamed and consumed one by one, or returned
 * in one array. Reports rows per second (median over iterations).
 */
async function streamRows(config: DriverConfig): Promise<unknown> {
  const count = config.rows ?? 1_000_000;
  const s = await session<typeof import("./bench_worker.ts").default>(
    workerUrl,
    { env: workerEnv },
  );
  const once = async (): Promise<void> => {
    if (config.contender === "airlock-array") {
      const rows = await s.rowsArray(count);
      check(rows.length === count, "row count");
      check(rows[count - 1]?.id === count - 1, "last row");
      return;
    }
    let seen = 0;
    for await (const row of s.rows(count)) {
      if (row.id !== seen) check(false, `row ${seen} in order`);
      seen++;
    }
    check(seen === count, "row count");
  };
  try {
    const rates: number[] = [];
    for (let i = -config.warmup; i < config.iterations; i++) {
      const start = performance.now();
      await once();
      const ms = performance.now() - start;
      if (i >= 0) rates.push(count / (ms / 1000));
    }
    return { rowsPerSecond: median(rates) };
  } finally {
    await s.close();
  }
}

/**
 * The tracing channel's cost per call, measured on the helpers every call
 * runs (src/parent/_events.ts): with nobody subscribed, `traceStart()` is
 * the whole per-call work (its checks of the five channels); with a no-op
 * subscriber, a call's start, end, attempt, asyncStart and asyncEnd, less
 * the same loop without them. The calls themselves (process round trips
 * of tens of µs) would hide a fraction of a µs in their noise.
 */
async function eventsCost(config: DriverConfig): Promise<unknown> {
  const ops = ["add", "query", "ingest", "stats"];
  if (config.contender === "metrics") {
    // What a call adds for stats()'s wait and run time summaries and
    // utilization (src/parent/_metrics.ts), as a session's calls use it.
    const metrics = new CallMetrics();
    const calls = (n: number, measured: boolean): number => {
      const start = performance.now();
      for (let i = 0; i < n; i++) {
        const call = { admittedAt: 0, sentAt: 0 };
        if (measured) {
          metrics.admitted(call);
          metrics.sending(call);
          metrics.placed(call);
          metrics.settled(call);
        } else call.sentAt = i;
      }
      return performance.now() - start;
    };
    calls(config.warmup, true);
    calls(config.warmup, false);
    const block = Math.ceil(config.iterations / 5);
    const bare: number[] = [];
    const measured: number[] = [];
    for (let round = 0; round < 5; round++) {
      bare.push(calls(block, false));
      measured.push(calls(block, true));
    }
    check(metrics.stats(false).runMs.count > 0, "calls measured");
    return {
      perCallUs: ((median(measured) - median(bare)) * 1000) / block,
    };
  }
  if (config.contender === "events-off") {
    let traced = 0;
    const loop = (n: number): number => {
      const start = performance.now();
      for (let i = 0; i < n; i++) {
        if (traceStart(ops[i & 3]!, "session", "bench_worker.ts")) traced++;
      }
      return performance.now() - start;
    };
    loop(config.warmup);
    const ms = loop(config.iterations);
    check(traced === 0, "nothing traced without a subscriber");
    return { perCallUs: (ms * 1000) / config.iterations };
  }
  const channel = tracingChannel(DIAGNOSTICS_CHANNELS.call);
  let seen = 0;
  const handlers = {
    start: () => void seen++,
    end: () => {},
    asyncStart: () => {},
    asyncEnd: () => void seen++,
    error: () => {},
  };
  const loop = async (n: number, traced: boolean): Promise<number> => {
    const start = performance.now();
    for (let i = 0; i < n; i++) {
      const promise = Promise.resolve(i);
      const context = traced
        ? traceStart(ops[i & 3]!, "session", "bench_worker.ts")
        : undefined;
      if (context) {
        traceAttempt(context, 1, 1);
        traceEnd(context, promise);
      }
      await promise;
      // asyncEnd runs in the microtask after the call settles.
      await undefined;
    }
    return performance.now() - start;
  };
  channel.subscribe(handlers);
  try {
    await loop(config.warmup / 10, false);
    await loop(config.warmup / 10, true);
    // Alternating blocks, the median of each kind: neither is favoured by
    // running first or by the machine's mood at one moment.
    const block = Math.ceil(config.iterations / 5);
    const bare: number[] = [];
    const traced: number[] = [];
    seen = 0;
    for (let round = 0; round < 5; round++) {
      bare.push(await loop(block, false));
      traced.push(await loop(block, true));
    }
    check(seen === 2 * 5 * block, "every call traced");
    return {
      perCallUs: ((median(traced) - median(bare)) * 1000) / block,
    };
  } finally {
    channel.unsubscribe(handlers);
  }
}

/**
 * The network row: a sandboxed worker's TCP client to an echo server in a
 * process of its own, connected directly (`net: true`: the host's network)
 * or through the forwarder and the parent's broker (a `host:port` grant).
 * One-byte round trips (p50) and 64 KiB writes echoed back (MiB/s).
 */
async function netCost(config: DriverConfig): Promise<unknown> {
  const echo = spawnPiped(
    scriptArgv(new URL("./_echo_server.ts", import.meta.url).pathname),
  );
  try {
    const reader = echo.stdout.getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("_echo_server.ts ended before its port");
      text += new TextDecoder().decode(value);
    }
    reader.releaseLock();
    const port = Number(text.trim());
    const forwarded = config.contender === "net-forwarded";
    const worker = await session<typeof netWorker>(
      new URL("./net_worker.ts", import.meta.url),
      {
        sandbox: "os",
        permissions: { net: forwarded ? [`127.0.0.1:${port}`] : true },
      },
    );
    try {
      const times = await worker.pingPong(
        "127.0.0.1",
        port,
        config.warmup,
        config.iterations,
      );
      const bytes = (config.bytesMiB ?? 64) * 2 ** 20;
      await worker.bulk("127.0.0.1", port, 4 * 2 ** 20);
      const rates: number[] = [];
      for (let i = 0; i < 3; i++) {
        rates.push(await worker.bulk("127.0.0.1", port, bytes));
      }
      return { p50: median(times), mibPerSecond: median(rates) };
    } finally {
      await worker.close();
    }
  } finally {
    await echo.closeStdin();
    await echo.exited;
  }
}

async function importCost(config: DriverConfig): Promise<unknown> {
  const withImport: number[] = [];
  const without: number[] = [];
  for (let i = -config.warmup; i < config.iterations; i++) {
    let t = performance.now();
    check(await runQuiet(bareArgv("empty.ts")) === 0, "empty.ts exits 0");
    const emptyMs = performance.now() - t;
    t = performance.now();
    check(
      await runQuiet(bareArgv("import_airlock.ts")) === 0,
      "import_airlock.ts exits 0",
    );
    const importMs = performance.now() - t;
    if (i >= 0) {
      without.push(emptyMs);
      withImport.push(importMs);
    }
  }
  return { importMs: median(withImport), emptyMs: median(without) };
}

/** Runs a program to its end, returning its exit code and stdout. */
async function runOutput(
  argv: string[],
  env: Record<string, string>,
): Promise<{ code: number; stdout: string }> {
  const { spawn } = await import("node:child_process");
  return await new Promise((resolve, reject) => {
    const child = spawn(argv[0] as string, argv.slice(1), {
      env,
      stdio: ["ignore", "pipe", "ignore"],
    });
    let stdout = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => stdout += chunk);
    child.on("error", reject);
    child.on("close", (code) => resolve({ code: code ?? -1, stdout }));
  });
}

/**
 * Issue 23: a CLI that imports airlock, makes one one-shot call and exits
 * (first_start.ts, which also reports its longest event-loop stall), against
 * the same CLI spawning a hand-written stdin/stdout worker (hand_cli.ts):
 * whole processes, spawn to exit.
 */
async function cli(config: DriverConfig): Promise<unknown> {
  // Both CLIs spawn processes and read files: all permissions on Deno.
  const cliArgv = (script: string, ...args: string[]): string[] =>
    runtimeName() === "deno"
      ? [execPath(), "run", "-A", "--quiet", scriptPath(script), ...args]
      : [execPath(), "run", scriptPath(script), ...args];
  const airlock: number[] = [];
  const hand: number[] = [];
  const stalls: number[] = [];
  const stallsNodeLoaded: number[] = [];
  const stallOf = (stdout: string): number =>
    (JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as {
      stallMs: number;
    }).stallMs;
  const env = {
    ...workerEnv,
    PATH: envVar("PATH") ?? "/usr/bin:/bin",
    HOME: envVar("HOME") ?? "/",
    ...(envVar("DENO_DIR") ? { DENO_DIR: envVar("DENO_DIR") as string } : {}),
  };
  for (let i = -config.warmup; i < config.iterations; i++) {
    let t = performance.now();
    const run = await runOutput(cliArgv("first_start.ts"), env);
    const airlockMs = performance.now() - t;
    check(run.code === 0, "first_start.ts exits 0");
    t = performance.now();
    check(
      (await runOutput(cliArgv("hand_cli.ts"), env)).code === 0,
      "hand_cli.ts exits 0",
    );
    const handMs = performance.now() - t;
    // Its stall in a program that started Node compatibility before.
    const loaded = await runOutput(
      cliArgv("first_start.ts", "node-loaded"),
      env,
    );
    check(loaded.code === 0, "first_start.ts node-loaded exits 0");
    if (i >= 0) {
      airlock.push(airlockMs);
      hand.push(handMs);
      stalls.push(stallOf(run.stdout));
      stallsNodeLoaded.push(stallOf(loaded.stdout));
    }
  }
  return {
    cliMs: median(airlock),
    handMs: median(hand),
    stallMs: median(stalls),
    stallMaxMs: Math.max(...stalls),
    stallNodeLoadedMs: median(stallsNodeLoaded),
  };
}

async function main(): Promise<void> {
  const config = JSON.parse(scriptArgs()[0] ?? "{}") as DriverConfig;
  let result: unknown;
  switch (config.scenario) {
    case "rtt":
      result = await rtt(config);
      break;
    case "throughput":
      result = await throughput(config);
      break;
    case "binary":
      result = await binary(config);
      break;
    case "rich":
      result = await rich(config);
      break;
    case "start":
      result = await start(config);
      break;
    case "pool":
      result = await poolRun(config);
      break;
    case "memory":
      result = await memory();
      break;
    case "import":
      result = await importCost(config);
      break;
    case "cli":
      result = await cli(config);
      break;
    case "stream":
      result = await streamRows(config);
      break;
    case "events":
      result = await eventsCost(config);
      break;
    case "net":
      result = await netCost(config);
      break;
    default:
      throw new Error(`Unknown scenario "${String(config.scenario)}"`);
  }
  console.log(JSON.stringify({ runtime: runtimeName(), result }));
}

try {
  await main();
} catch (error: unknown) {
  console.error(error instanceof Error ? error.stack : String(error));
  exit(1);
}
