/**
 * Turns the per-round results into docs/benchmarks.md (medians, ratios to
 * the floor and to each peer, the issue's targets met or missed) and
 * docs/benchmarks.svg (bar charts drawn from the same numbers). Pure.
 *
 * @module
 */

import {
  BINARY_SIZES_MIB,
  type Job,
  type Placement,
  type ScenarioId,
  type Settings,
} from "./_plan.ts";
import { median } from "./_stats.ts";

/** Where and when the run happened. */
export interface Environment {
  /** ISO date of the start. */
  date: string;
  /** `deno --version`, first line. */
  deno: string;
  /** Bun's version line. */
  bun: string;
  /** Node's version line. */
  node: string;
  /** `cc --version`, first line. */
  cc: string;
  /** CPU model. */
  cpu: string;
  /** Logical cores. */
  cores: number;
  /** Memory. */
  memoryGiB: number;
  /** Kernel release. */
  kernel: string;
  /** Load averages (1, 5, 15 min) before the run. */
  loadBefore: number[];
  /** Load averages after the run. */
  loadAfter: number[];
  /** Rounds per scenario. */
  rounds: number;
  /** How long the run took. */
  durationS: number;
}

/** Medians over rounds of every numeric field of a job's results. */
type Aggregate = Record<string, number>;

function aggregate(
  results: Map<string, Record<string, unknown>[]>,
  key: string,
): Aggregate | undefined {
  const rounds = results.get(key);
  if (!rounds || rounds.length === 0) return undefined;
  const fields = new Map<string, number[]>();
  for (const round of rounds) {
    for (const [name, value] of Object.entries(round)) {
      if (typeof value !== "number") continue;
      const list = fields.get(name) ?? [];
      list.push(value);
      fields.set(name, list);
    }
  }
  const out: Aggregate = {};
  for (const [name, values] of fields) out[name] = median(values);
  out.rounds = rounds.length;
  return out;
}

function fmt(value: number | undefined, digits = 1): string {
  if (value === undefined || !Number.isFinite(value)) return "–";
  if (Math.abs(value) >= 10_000) {
    return Math.round(value).toLocaleString("en-US");
  }
  return value.toFixed(digits);
}

function ratio(value: number | undefined): string {
  if (value === undefined || !Number.isFinite(value)) return "–";
  return `${value.toFixed(2)}×`;
}

/** One target of the issue, evaluated. */
interface TargetRow {
  what: string;
  target: string;
  deno: string;
  bun: string;
}

function verdict(
  value: number | undefined,
  ok: (v: number) => boolean,
  show: (v: number) => string,
): string {
  if (value === undefined || !Number.isFinite(value)) return "not measured";
  return `${show(value)} ${ok(value) ? "met" : "**missed**"}`;
}

class View {
  constructor(
    readonly jobs: readonly Job[],
    readonly results: Map<string, Record<string, unknown>[]>,
  ) {}

  get(
    scenario: ScenarioId,
    host: string,
    contender: string,
    placement?: Placement,
  ) {
    return aggregate(
      this.results,
      `${scenario}/${host}/${contender}${placement ? `/${placement}` : ""}`,
    );
  }

  job(job: Job) {
    return aggregate(this.results, job.key);
  }

  of(scenario: ScenarioId): Job[] {
    return this.jobs.filter((job) => job.scenario === scenario);
  }
}

function targets(view: View): TargetRow[] {
  const rows: TargetRow[] = [];
  const both = (
    what: string,
    target: string,
    value: (rt: "deno" | "bun") => number | undefined,
    ok: (v: number) => boolean,
    show: (v: number) => string,
  ): void => {
    rows.push({
      what,
      target,
      deno: verdict(value("deno"), ok, show),
      bun: verdict(value("bun"), ok, show),
    });
  };
  const x = (v: number) => `${v.toFixed(2)}×`;
  both(
    "(a) p50 round trip vs the floor",
    "≤ 1.2×",
    (rt) =>
      (view.get("rtt", rt, "airlock")?.p50 ?? NaN) /
      (view.get("rtt", rt, "floor")?.p50 ?? NaN),
    (v) => v <= 1.2,
    x,
  );
  both(
    "(a) one core: p50 round trip vs the floor",
    "≤ 1.2×",
    (rt) =>
      (view.get("rtt", rt, "airlock", "one-core")?.p50 ?? NaN) /
      (view.get("rtt", rt, "floor", "one-core")?.p50 ?? NaN),
    (v) => v <= 1.2,
    x,
  );
  both(
    "(a) two cores: p50 round trip vs the floor",
    "≤ 1.2×",
    (rt) =>
      (view.get("rtt", rt, "airlock", "two-cores")?.p50 ?? NaN) /
      (view.get("rtt", rt, "floor", "two-cores")?.p50 ?? NaN),
    (v) => v <= 1.2,
    x,
  );
  for (const placement of [undefined, "one-core", "two-cores"] as const) {
    rows.push({
      what: `(a) ${
        placement ? `${placement.replace("-", " ")}: ` : ""
      }p50 round trip vs Bun.spawn ipc json`,
      target: "≤ 1× (Bun)",
      deno: "–",
      bun: verdict(
        (view.get("rtt", "bun", "airlock", placement)?.p50 ?? NaN) /
          (view.get("rtt", "bun", "bun-ipc-json", placement)?.p50 ?? NaN),
        (v) => v <= 1,
        x,
      ),
    });
  }
  both(
    "(a) p99 / p50",
    "≤ 4×",
    (rt) => {
      const a = view.get("rtt", rt, "airlock");
      return a ? a.p99! / a.p50! : undefined;
    },
    (v) => v <= 4,
    x,
  );
  both(
    "(a) stretch: p50 vs the C ping-pong",
    "≤ 1.5×",
    (rt) =>
      (view.get("rtt", rt, "airlock")?.p50 ?? NaN) /
      (view.get("rtt", "c", "pingpong")?.p50 ?? NaN),
    (v) => v <= 1.5,
    x,
  );
  both(
    "(a) stretch, one core: p50 vs the C ping-pong",
    "≤ 1.5×",
    (rt) =>
      (view.get("rtt", rt, "airlock", "one-core")?.p50 ?? NaN) /
      (view.get("rtt", "c", "pingpong", "one-core")?.p50 ?? NaN),
    (v) => v <= 1.5,
    x,
  );
  both(
    "(a) stretch, two cores: p50 vs the C ping-pong",
    "≤ 1.5×",
    (rt) =>
      (view.get("rtt", rt, "airlock", "two-cores")?.p50 ?? NaN) /
      (view.get("rtt", "c", "pingpong", "two-cores")?.p50 ?? NaN),
    (v) => v <= 1.5,
    x,
  );
  both(
    "events: airlock:call cost per call, no subscriber",
    "≤ 0.3 µs",
    (rt) => view.get("events", rt, "events-off")?.perCallUs,
    (v) => v <= 0.3,
    (v) => `${v.toFixed(3)} µs`,
  );
  both(
    "events: airlock:call cost per call, a no-op subscriber",
    "(measured)",
    (rt) => view.get("events", rt, "events-on")?.perCallUs,
    () => true,
    (v) => `${v.toFixed(2)} µs`,
  );
  both(
    "metrics: stats() timing figures, cost per call",
    "(measured)",
    (rt) => view.get("events", rt, "metrics")?.perCallUs,
    () => true,
    (v) => `${v.toFixed(2)} µs`,
  );
  both(
    "net: round trip added by a host:port grant (relay + broker), p50",
    "≤ 0.2 ms",
    (rt) =>
      ((view.get("net", rt, "net-forwarded")?.p50 ?? NaN) -
        (view.get("net", rt, "net-direct")?.p50 ?? NaN)) / 1000,
    (v) => v <= 0.2,
    (v) => `${v.toFixed(3)} ms`,
  );
  both(
    "net: 64 KiB writes through a host:port grant vs net: true",
    "≥ 0.7×",
    (rt) =>
      (view.get("net", rt, "net-forwarded")?.mibPerSecond ?? NaN) /
      (view.get("net", rt, "net-direct")?.mibPerSecond ?? NaN),
    (v) => v >= 0.7,
    x,
  );
  both(
    "(a) watch: added p50 per call",
    "≤ 5 µs",
    (rt) =>
      (view.get("rtt", rt, "airlock-watch")?.p50 ?? NaN) -
      (view.get("rtt", rt, "airlock")?.p50 ?? NaN),
    (v) => v <= 5,
    (v) => `${v.toFixed(1)} µs`,
  );
  both(
    "(b) calls/s vs the floor, 64 in flight",
    "≥ 0.8×",
    (rt) =>
      (view.get("throughput", rt, "airlock")?.callsPerSecond ?? NaN) /
      (view.get("throughput", rt, "floor")?.callsPerSecond ?? NaN),
    (v) => v >= 0.8,
    x,
  );
  both(
    "(c) 64 MiB round trip vs raw pipe read",
    "≥ 0.5×",
    (rt) =>
      (view.get("binary", rt, "airlock")?.["64MiB"] ?? NaN) /
      (view.get("binary", rt, "pipe-read")?.["64MiB"] ?? NaN),
    (v) => v >= 0.5,
    x,
  );
  both(
    "(d) rich payload: superjson alone / airlock round trip",
    "≥ 5×",
    (rt) =>
      (view.get("rich", rt, "superjson")?.ms ?? NaN) /
      (view.get("rich", rt, "airlock")?.ms ?? NaN),
    (v) => v >= 5,
    x,
  );
  both(
    "(e) one-shot call vs bare start, same wrappers",
    "≤ 1.2×",
    (rt) => {
      const s = view.get("start", rt, "start");
      return s ? s.oneShotMs! / s.bareMs! : undefined;
    },
    (v) => v <= 1.2,
    x,
  );
  both(
    "(f) tinypool / airlock pool, 1,000 calls",
    "≥ 3×",
    (rt) =>
      (view.get("pool", "node", "tinypool")?.totalMs ?? NaN) /
      (view.get("pool", rt, "pool")?.totalMs ?? NaN),
    (v) => v >= 3,
    x,
  );
  both(
    "(f) p99 with maxTasksPerWorker 100 / without",
    "≤ 2×",
    (rt) =>
      (view.get("pool", rt, "pool-recycle")?.p99Ms ?? NaN) /
      (view.get("pool", rt, "pool")?.p99Ms ?? NaN),
    (v) => v <= 2,
    x,
  );
  // Issue 23: the sandbox at the cost of the floor.
  both(
    "(23) sandboxed bare start / unwrapped bare start",
    "≤ 1.5×",
    (rt) => {
      const s = view.get("start", rt, "start");
      return s ? s.bareMs! / s.bareUnwrappedMs! : undefined;
    },
    (v) => v <= 1.5,
    x,
  );
  both(
    "(23) cold one-shot call / unwrapped bare start",
    "≤ 2×",
    (rt) => {
      const s = view.get("start", rt, "start");
      return s ? s.oneShotMs! / s.bareUnwrappedMs! : undefined;
    },
    (v) => v <= 2,
    x,
  );
  const cliRatio = (rt: "deno" | "bun"): number => {
    const c = view.get("cli", rt, "cli");
    return (c?.cliMs ?? NaN) / (c?.handMs ?? NaN);
  };
  rows.push({
    what:
      "(23) CLI with one one-shot call / the same CLI spawning a hand-written worker",
    target: "≤ 2.5× (Deno), ≤ 3× (Bun)",
    deno: verdict(cliRatio("deno"), (v) => v <= 2.5, x),
    bun: verdict(cliRatio("bun"), (v) => v <= 3, x),
  });
  both(
    "(23) longest event-loop stall of the parent during a first start",
    "≤ 10 ms",
    (rt) => view.get("cli", rt, "cli")?.stallMs,
    (v) => v <= 10,
    (v) => `${v.toFixed(1)} ms`,
  );
  both(
    "(23) recycling p99 / no recycling, a burst of 1,000 calls",
    "≤ 3×",
    (rt) =>
      (view.get("pool", rt, "pool-recycle")?.p99Ms ?? NaN) /
      (view.get("pool", rt, "pool")?.p99Ms ?? NaN),
    (v) => v <= 3,
    x,
  );
  both(
    "(23) recycling p99 / no recycling, a call every 2 ms",
    "≤ 3×",
    (rt) =>
      (view.get("pool", rt, "pool-recycle-paced")?.p99Ms ?? NaN) /
      (view.get("pool", rt, "pool-paced")?.p99Ms ?? NaN),
    (v) => v <= 3,
    x,
  );
  both(
    "(g) idle worker RSS − bare runtime",
    "≤ 10 MiB",
    (rt) => {
      const m = view.get("memory", rt, "memory");
      return m ? m.workerMiB! - m.bareMiB! : undefined;
    },
    (v) => v <= 10,
    (v) => `${v.toFixed(1)} MiB`,
  );
  both(
    "(h) start added by importing airlock",
    "≤ 10 ms",
    (rt) => {
      const m = view.get("import", rt, "import");
      return m ? m.importMs! - m.emptyMs! : undefined;
    },
    (v) => v <= 10,
    (v) => `${v.toFixed(1)} ms`,
  );
  return rows;
}

function table(header: string[], rows: string[][]): string {
  const align = header.map((_, i) => (i === 0 ? "---" : "---:"));
  return [
    `| ${header.join(" | ")} |`,
    `| ${align.join(" | ")} |`,
    ...rows.map((row) => `| ${row.join(" | ")} |`),
  ].join("\n");
}

function runtimeOf(job: Job): "deno" | "bun" | undefined {
  if (job.label.includes("(Deno)")) return "deno";
  if (job.label.includes("(Bun)")) return "bun";
  return undefined;
}

function rttSection(view: View): string {
  const jobs = view.of("rtt");
  const airlock = (rt: string, placement: Placement | undefined) =>
    view.get("rtt", rt, "airlock", placement)?.p50;
  const rows = jobs.map((job) => {
    const pinned = job.placement;
    const a = view.job(job);
    const rt = runtimeOf(job);
    const floor = rt ? view.get("rtt", rt, "floor", pinned)?.p50 : undefined;
    return [
      job.label,
      fmt(a?.p50),
      fmt(a?.p99),
      fmt(a?.mean),
      floor ? ratio((a?.p50 ?? NaN) / floor) : "–",
      ratio((airlock("deno", pinned) ?? NaN) / (a?.p50 ?? NaN)),
      ratio((airlock("bun", pinned) ?? NaN) / (a?.p50 ?? NaN)),
      fmt(a?.parentCpuUs),
      fmt(a?.workerCpuUs),
    ];
  });
  return table([
    "contender",
    "p50 µs",
    "p99 µs",
    "mean µs",
    "p50 / floor (same runtime)",
    "airlock Deno p50 / this",
    "airlock Bun p50 / this",
    "CPU per call, parent µs",
    "CPU per call, child µs",
  ], rows);
}

function throughputSection(view: View): string {
  const airlock = (rt: string) =>
    view.get("throughput", rt, "airlock")?.callsPerSecond;
  const rows = view.of("throughput").map((job) => {
    const a = view.job(job)?.callsPerSecond;
    const rt = runtimeOf(job);
    const floor = rt
      ? view.get("throughput", rt, "floor")?.callsPerSecond
      : undefined;
    return [
      job.label,
      fmt(a, 0),
      floor ? ratio((a ?? NaN) / floor) : "–",
      ratio((airlock("deno") ?? NaN) / (a ?? NaN)),
      ratio((airlock("bun") ?? NaN) / (a ?? NaN)),
      fmt(view.job(job)?.parentCpuUs),
      fmt(view.job(job)?.workerCpuUs),
    ];
  });
  return table([
    "contender",
    "calls/s",
    "vs floor (same runtime)",
    "airlock Deno / this",
    "airlock Bun / this",
    "CPU per call, parent µs",
    "CPU per call, child µs",
  ], rows);
}

function binarySection(view: View): string {
  const rows = view.of("binary").map((job) => {
    const a = view.job(job);
    const rt = runtimeOf(job) ?? "deno";
    const raw = view.get("binary", rt, "pipe-read")?.["64MiB"];
    return [
      job.label,
      ...BINARY_SIZES_MIB.map((mib) => fmt(a?.[`${mib}MiB`], 0)),
      raw ? ratio((a?.["64MiB"] ?? NaN) / raw) : "–",
    ];
  });
  return table([
    "contender",
    ...BINARY_SIZES_MIB.map((mib) => `${mib} MiB, MB/s`),
    "64 MiB / raw pipe read",
  ], rows);
}

function richSection(view: View): string {
  const rows = view.of("rich").map((job) => {
    const a = view.job(job)?.ms;
    const rt = runtimeOf(job) ?? "deno";
    const sj = view.get("rich", rt, "superjson")?.ms;
    return [job.label, fmt(a, 2), ratio((sj ?? NaN) / (a ?? NaN))];
  });
  return table(["contender", "ms", "superjson alone / this"], rows);
}

function streamSection(view: View): string {
  const rows = view.of("stream").map((job) => {
    const rate = view.job(job)?.rowsPerSecond;
    const rt = runtimeOf(job) ?? "deno";
    const array = view.get("stream", rt, "airlock-array")?.rowsPerSecond;
    return [
      job.label,
      fmt(rate === undefined ? undefined : rate / 1000, 0),
      ratio((rate ?? NaN) / (array ?? NaN)),
    ];
  });
  return table(["contender", "thousand rows/s", "this / one array"], rows);
}

function startSection(view: View): string {
  const rows = view.of("start").map((job) => {
    const s = view.job(job);
    return [
      job.label,
      fmt(s?.oneShotMs),
      fmt(s?.bareMs),
      fmt(s?.bareUnwrappedMs),
      ratio((s?.oneShotMs ?? NaN) / (s?.bareMs ?? NaN)),
      fmt(
        s?.bareMs === undefined || s.bareNoLimitsMs === undefined
          ? undefined
          : s.bareMs - s.bareNoLimitsMs + (s.cgroupMs ?? 0),
      ),
      fmt(s?.cgroupMs),
    ];
  });
  return table([
    "contender",
    "one-shot call, ms",
    "bare start, same wrappers, ms",
    "bare `run empty.ts`, unwrapped, ms",
    "one-shot / bare (same wrappers)",
    "limits step + cgroup add, ms",
    "of which the parent's group, ms",
  ], rows);
}

function poolSection(view: View): string {
  const tiny = view.get("pool", "node", "tinypool");
  const rows = view.of("pool").map((job) => {
    const p = view.job(job);
    return [
      job.label,
      fmt(p?.totalMs),
      fmt(
        p
          ? 1000 * (job.config.iterations as number ?? 1000) / p.totalMs!
          : undefined,
        0,
      ),
      fmt(p?.p99Ms),
      job.contender === "tinypool"
        ? "1.00×"
        : job.config.paceMs
        ? "– (paced)"
        : ratio((tiny?.totalMs ?? NaN) / (p?.totalMs ?? NaN)),
    ];
  });
  return table([
    "contender",
    "all calls, ms",
    "calls/s",
    "p99 latency, ms",
    "tinypool time / this",
  ], rows);
}

function memorySection(view: View): string {
  const rows = view.of("memory").map((job) => {
    const m = view.get("memory", job.host, "memory");
    return [
      job.host === "deno" ? "Deno" : "Bun",
      fmt(m?.workerMiB),
      fmt(m?.bareMiB),
      fmt(m ? m.workerMiB! - m.bareMiB! : undefined),
      fmt(m?.wrapperMiB),
    ];
  });
  return table([
    "runtime",
    "idle airlock worker, MiB",
    "bare idle process, MiB",
    "difference, MiB",
    "sandbox wrapper processes, MiB",
  ], rows);
}

function cliSection(view: View): string {
  const rows = view.of("cli").map((job) => {
    const c = view.get("cli", job.host, "cli");
    return [
      job.host === "deno" ? "Deno" : "Bun",
      fmt(c?.cliMs),
      fmt(c?.handMs),
      ratio((c?.cliMs ?? NaN) / (c?.handMs ?? NaN)),
      fmt(c?.stallMs),
      fmt(c?.stallMaxMs),
      fmt(c?.stallNodeLoadedMs),
    ];
  });
  return table([
    "runtime",
    "CLI, one one-shot call, ms",
    "CLI spawning a hand-written worker, ms",
    "ratio",
    "longest event-loop stall, median, ms",
    "longest stall, worst run, ms",
    "longest stall, Node compatibility started before, median, ms",
  ], rows);
}

function importSection(view: View): string {
  const rows = view.of("import").map((job) => {
    const m = view.get("import", job.host, "import");
    return [
      job.host === "deno" ? "Deno" : "Bun",
      fmt(m?.importMs),
      fmt(m?.emptyMs),
      fmt(m ? m.importMs! - m.emptyMs! : undefined),
    ];
  });
  return table([
    "runtime",
    "script importing airlock, ms",
    "empty script, ms",
    "added, ms",
  ], rows);
}

/**
 * Renders docs/benchmarks.md.
 *
 * @param jobs Every job that ran.
 * @param results Per-round results by job key.
 * @param env The machine and the run.
 * @param settings Full or smoke.
 * @returns The markdown.
 */
export function renderMarkdown(
  jobs: readonly Job[],
  results: Map<string, Record<string, unknown>[]>,
  env: Environment,
  settings: Settings,
): string {
  const view = new View(jobs, results);
  const has = (id: ScenarioId) => jobs.some((job) => job.scenario === id);
  const load = (values: number[]) => values.map((v) => v.toFixed(2)).join(", ");
  const parts: string[] = [];
  parts.push(`# airlock benchmarks

Generated by \`deno task bench\` (scripts/bench/main.ts) on ${
    env.date.slice(0, 10)
  }. Do not edit by hand: rerun the task. The chart, [benchmarks.svg](benchmarks.svg), is drawn by the same run.

- Machine: ${env.cpu}, ${env.cores} cores, ${
    env.memoryGiB.toFixed(0)
  } GiB, Linux ${env.kernel}; load average ${load(env.loadBefore)} before, ${
    load(env.loadAfter)
  } after (other work shares this machine).
- Runtimes: ${env.deno}; ${env.bun}; ${env.node}; ${env.cc}.
- Method: every scenario runs in ${env.rounds} round${
    env.rounds === 1 ? "" : "s"
  }${
    settings.smoke ? " (smoke run: no timing claims)" : ""
  }; a round runs each contender once, one after another, each in a fresh process with its own warm-up, so a busy machine slows all of them alike. Every figure is the median over rounds. Every echoed value is checked. The run took ${
    env.durationS.toFixed(0)
  } s.
- The floor is a hand-written length-prefixed echo loop over the same stdin/stdout pipes, in the same runtime, with the same I/O calls airlock's adapter uses and no codec (scripts/bench/floor_worker.ts); the C ping-pong is the machine's limit for a pipe round trip (scripts/bench/pingpong.c). Processes are not pinned to cores: a round trip whose two processes share a core costs a few µs of wake-up, one that crosses cores tens of µs, and which one a run gets is up to the scheduler; the rows marked "one core" run every process of the contender on core 0 (\`taskset -c 0\`), which leaves the CPU work of a round trip; the rows marked "two cores" keep the caller on core 0 and move the other process (all its threads) to core 1, so every round trip pays two cross-core wake-ups. Both pinned modes are steady where the unpinned one is not.`);
  parts.push(`## Targets (issue 6)

${
    table(
      ["target", "goal", "Deno", "Bun"],
      targets(view).map((row) => [row.what, row.target, row.deno, row.bun]),
    )
  }`);
  if (has("rtt")) {
    parts.push(`## (a) Round trip, tiny payload, one call in flight

A call of \`add(i, 1)\` (the peers echo a message of the same shape; the floor and C echo 32 bytes), one after another. CPU per call is the CPU time (user + system, all threads, from /proc, 10 ms resolution) each side used during the measured calls, divided by the calls: it says which side a round trip spends its time on.

${rttSection(view)}`);
  }
  if (has("throughput")) {
    parts.push(`## (b) Throughput, 64 calls in flight

${throughputSection(view)}`);
  }
  if (has("binary")) {
    parts.push(`## (c) Binary round trip

A \`Uint8Array\` echoed by the worker. MB/s counts the bytes that crossed the pipes, both ways (2 × size / round trip, 1 MB = 10⁶ bytes), so that it compares with the raw pipe read rate: a child (\`head -c\`) writing into the runtime's spawn pipe, read to the end.

${binarySection(view)}`);
  }
  if (has("rich")) {
    parts.push(`## (d) Rich payload

1,000 rows, each with a \`Date\`, a \`Map\`, a \`bigint\` and nested arrays. airlock's figure is a whole round trip to the worker and back (two encodes, two decodes, two pipe crossings); superjson's is one \`stringify\` + \`parse\` in the same process, no I/O.

${richSection(view)}`);
  }
  if (has("start")) {
    parts.push(`## (e) One-shot call

\`oneShot(...).add(1, 2)\` (spawn, handshake, call, shutdown, exit) against a bare start of the same runtime to its exit under the same wrappers as the worker (\`setpriv\`, and for a sandboxed worker bubblewrap and the Landlock/seccomp confine step; built by airlock's own command builder with the worker swapped for an empty program, \`scripts/bench/_wrapped_bare.ts\`), spawned the same way from the same process, alternating. The unwrapped \`deno run empty.ts\` / \`bun run empty.ts\` is shown beside it.

${startSection(view)}`);
  }
  if (has("pool")) {
    parts.push(`## (f) Pool of 2, 1,000 trivial calls

All calls submitted at once to a warmed pool (after 200 warm-up calls); p99 is the 99th percentile of the time from submission to each call's answer, so for a burst it is close to the time the whole batch takes. The paced rows issue one call every 2 ms instead (a service's shape) and time each call from its own issue. With \`maxTasksPerWorker: 100\` a burst retires a worker every 100 calls, sooner than a sandboxed start ends: each of the ten replacements is started ahead, but a worker's 100 calls take a few tens of ms against a start's ~100 ms on a busy machine, so the burst waits on starts and the row measures start CPU and wall time; paced, the replacement is ready before its worker retires. tinypool runs under Node with its \`child_process\` runtime, 2 workers.

${poolSection(view)}`);
  }
  if (has("memory")) {
    parts.push(`## (g) Resident memory of an idle worker

VmRSS of the worker process 0.5 s after one call, against a bare runtime process (scripts/bench/idle.ts) left idle the same way. Bun workers run inside the OS sandbox by default (bubblewrap: Bun has no permission model); the wrapper processes between the parent and the worker are listed apart.

${memorySection(view)}`);
  }
  if (has("stream")) {
    parts.push(`## Streaming rows

1,000,000 small rows (\`{ id, name }\`) from a session: streamed by an async generator handler and consumed one by one with \`for await\` (the worker batches them, within the default window of 1024 rows and 4 MiB), against the same rows returned by an ordinary handler in one array. The stream holds at most a window of rows on each side; the array holds all of them, twice, at its peak.

${streamSection(view)}`);
  }
  if (has("import")) {
    parts.push(`## (h) What importing airlock adds to a CLI's start

\`deno run import_airlock.ts\` (imports \`mod.ts\`, exits) against \`deno run empty.ts\`; the same on Bun.

${importSection(view)}`);
  }
  if (has("cli")) {
    parts.push(`## Issue 23: a CLI with one one-shot call

Whole processes, spawn to exit: \`scripts/bench/first_start.ts\` imports airlock, makes one \`oneShot\` call with the default options (sandboxed) and exits; \`scripts/bench/hand_cli.ts\` spawns a hand-written stdin/stdout worker (\`hand_worker.ts\`) on the same runtime, asks it one sum and exits. Both run with all permissions on Deno. first_start.ts also reports the longest gap of a 1 ms timer from the call (after its import of airlock) to the answer: the parent's longest event-loop stall during its first start. It touches no Node built-in before the call; on Deno the start is then what starts Node compatibility (one block of some 20 to 35 ms: \`node:child_process\` is the only Deno spawn that can hand bubblewrap the native step's descriptor), so the last column runs it after an import of \`node:process\`, as in a program that uses any npm package.

${cliSection(view)}`);
  }
  parts.push(FIGURES_BEHIND_THE_CODE);
  return `${parts.join("\n\n")}\n`;
}

/**
 * Measurements that shaped the code, kept here (not in its comments) and
 * written at the end of every report: they are not this run's.
 */
const FIGURES_BEHIND_THE_CODE = `## Figures behind the code

Measurements that shaped a piece of the code, taken once on the 2-core CI machine when the change was made (not by this run). The code's comments name the choice; the figures live here.

| where | choice | figure when measured |
| --- | --- | --- |
| \`src/parent/_metrics.ts\` | one clock reading per read of answers, not per answer | \`performance.now()\` ~0.15 µs each on Deno; 64 answers of a read paid 64 |
| \`src/parent/_mode.ts\` | the unsettled calls linked through the calls, not a \`Set\` | a \`Set\`'s add and delete per call: 300 to 770 ns, the list's six writes 22 to 66 ns (Deno and Bun, load 17) |
| \`src/parent/_deadlines.ts\` | one shared timer for the calls in flight | a timer per call: ~1.6 µs of CPU per call on Deno, a quarter of the parent's work at 64 calls in flight |
| \`src/parent/_log_sink.ts\` | one write per chunk of log output | a write per line: ~6.5 µs; 4 MiB of empty lines held the parent's event loop 27 s |
| \`src/parent/_launch.ts\` | the first start's code imported in parts | a whole-graph import: 20 to 45 ms in one block; a part: at most a few ms |
| \`src/runtime/deno.ts\` | small frames written to stdout synchronously | an async \`Deno.stdout.write\`: ~35 µs per frame; a 71 KB answer arrived 0.15 to 2 ms later under load (issue 16) |
| \`src/runtime/deno.ts\` | stdin read by a plain async iterator | a pulled \`ReadableStream\`: ~0.8 to 1.2 µs more per chunk |
| \`src/protocol/_shapes.ts\` | a key sequence compiled after 16 sightings | compiling one: 15 to 250 µs |
| \`src/protocol/_shapes.ts\` | a row of a known shape built by one compiled object literal (\`new Function\`), not key by key | decoding 1,000 rows (best of 80 × 3 runs, load ~10), compiled / key bytes matched but stored one by one / no shapes: codec_compare's rich rows Deno 0.51 / 0.63 / 1.24 ms, Bun 0.51 / 0.88 / 0.85 ms; six-key plain rows Deno 0.27 / 0.39 / 0.42 ms, Bun 0.25 / 0.27 / 0.43 ms |
| \`src/protocol/decode_value.ts\` | the \`DataView\` made on first use | a \`DataView\` per message: ~0.15 µs on Deno |
| \`src/runtime/sha256.ts\`, \`src/runtime/bun_entry.ts\` | no \`node:crypto\` on a parent's first start | its first load: 7 to 10 ms of CPU in one block |
| \`src/runtime/node_builtins.ts\`, \`src/runtime/bun.ts\` | no \`node:\` import at import time on Deno | Node compatibility on Deno: ~25 ms of CPU at start (measured another time: ~15 ms of start and ~10 MiB) |
| \`src/worker/serve.ts\` | the call path run once after the hello | without it, ~1.5 ms fell on an idle one-shot spare's first call |
| \`src/runtime/bun.ts\` | the gated stream class made on first use | Deno's web streams: ~3 ms of a Deno program's start |
| \`src/runtime/bun_entry.ts\` | the Bun entry bundled minified, ahead (checked in); built per process, in the background, only where it does not match | import: 3.6 to 3.7 ms of CPU unminified, 3.1 ms minified; a synchronous build held the parent 40 to 100 ms; the per-process build and an unbundled first worker: ~70 ms of a Bun CLI's CPU (first_start.ts, median 287 → 215 ms, load 3) |
| \`src/runtime/launch/code_cache.ts\` | no warm-up start while the sources in the warm mark are unchanged | a warm-up start: ~110 ms of a Deno CLI's CPU (first_start.ts, median 478 → 366 ms, load 3 to 5) |
| \`src/runtime/turns.ts\` | the start's turns given by an immediate, not a zero timeout (on Deno a zero timeout at least every 2 ms) | a chain of \`setTimeout(0)\`: 2.2 to 2.5 ms a turn on Deno, 1.1 ms on Bun (an immediate: 0.025 and 0.006 ms); a CLI with one call (first_start.ts, 10 alternated runs, load 1) median 402 → 330 ms on Deno, 217 → 183 ms on Bun; Deno's loop read a pipe only after 63 immediates, and a paced pool's recycling p99 went 6 → 11 ms, so on Deno a turn waits on a timer when 2 ms passed since the last: the CLI row (2 rounds, alternated) 2.49 / 2.54× with timers only, 2.36 / 2.37× so, paced p99 6.0 to 6.2 ms either way |
| \`src/runtime/sandbox/pid_namespace.ts\` | the shared pid namespace's holder started while the first worker's build goes on | the holder's start: 8 to 17 ms of wall before the first spawn; started ahead, a CLI with one call (first_start.ts, alternated, load 1) median 208 → 192 ms on Bun (20 runs), 365 → 347 ms on Deno (12) |
| \`src/runtime/sandbox/limits/cgroup_v1.ts\` | the limits step joins each v1 group through \`tasks\`, not \`cgroup.procs\` | a first write to \`cgroup.procs\` after a quiet spell: 5 to 17 ms of wall time (an RCU grace period), through \`tasks\`: 0.5 ms; the bare sandboxed start (2 rounds, alternated) 64 → 48 to 54 ms on Deno, 29 to 30 → 21 to 24 ms on Bun |
| \`src/worker/chmod_fallback.ts\` | a Bun worker installs the chmod retry only under Landlock alone (\`--chmod-fallback\`) | loading \`node:fs\` and its promises for it: 7 to 9 ms of every Bun worker's start; the cold one-shot call (2 rounds, alternated) 64 to 67 → 58 to 63 ms |`;

interface Bar {
  label: string;
  value: number;
  kind: "airlock" | "floor" | "peer";
}

interface Panel {
  title: string;
  unit: string;
  bars: Bar[];
}

function kindOf(contender: string): Bar["kind"] {
  if (contender.startsWith("airlock") || contender.startsWith("pool")) {
    return "airlock";
  }
  if (
    contender.startsWith("floor") || contender === "pingpong" ||
    contender === "pipe-read"
  ) {
    return "floor";
  }
  return "peer";
}

function escapeXml(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(
    />/g,
    "&gt;",
  );
}

/**
 * Renders docs/benchmarks.svg: one bar chart per scenario, from the medians.
 *
 * @param jobs Every job that ran.
 * @param results Per-round results by job key.
 * @param env The machine and the run.
 * @returns The SVG document.
 */
export function renderSvg(
  jobs: readonly Job[],
  results: Map<string, Record<string, unknown>[]>,
  env: Environment,
): string {
  const view = new View(jobs, results);
  const panels: Panel[] = [];
  const simple = (
    scenario: ScenarioId,
    title: string,
    unit: string,
    field: string,
  ): void => {
    const bars = view.of(scenario).map((job) => ({
      label: job.label,
      value: view.job(job)?.[field] ?? NaN,
      kind: kindOf(job.contender),
    })).filter((bar) => Number.isFinite(bar.value));
    if (bars.length > 0) panels.push({ title, unit, bars });
  };
  simple(
    "rtt",
    "(a) Round trip, one call in flight: p50 (lower is better)",
    "µs",
    "p50",
  );
  simple(
    "throughput",
    "(b) Throughput, 64 calls in flight (higher is better)",
    "calls/s",
    "callsPerSecond",
  );
  simple(
    "binary",
    "(c) 64 MiB binary round trip, bytes both ways (higher is better)",
    "MB/s",
    "64MiB",
  );
  simple("rich", "(d) 1,000 rich rows (lower is better)", "ms", "ms");
  simple(
    "stream",
    "Streaming 1,000,000 small rows (higher is better)",
    "rows/s",
    "rowsPerSecond",
  );
  const pairs = (
    scenario: ScenarioId,
    title: string,
    unit: string,
    fields: [string, string, string][],
  ): void => {
    const bars: Bar[] = [];
    for (const job of view.of(scenario)) {
      const a = view.job(job);
      const rt = job.host === "deno" ? "Deno" : "Bun";
      const variant = job.contender.endsWith("-nosandbox")
        ? ", no sandbox"
        : "";
      for (const [field, label, kind] of fields) {
        const value = a?.[field];
        if (variant && kind !== "airlock") continue;
        if (value !== undefined && Number.isFinite(value)) {
          bars.push({
            label: `${label}${variant} (${rt})`,
            value,
            kind: kind as Bar["kind"],
          });
        }
      }
    }
    if (bars.length > 0) panels.push({ title, unit, bars });
  };
  pairs(
    "start",
    "(e) One-shot call vs bare runtime start (lower is better)",
    "ms",
    [
      ["oneShotMs", "airlock one-shot call", "airlock"],
      ["bareMs", "bare start, same wrappers", "floor"],
    ],
  );
  simple(
    "pool",
    "(f) 1,000 calls on a pool of 2 (lower is better)",
    "ms",
    "totalMs",
  );
  pairs("memory", "(g) Resident memory, idle (lower is better)", "MiB", [
    ["workerMiB", "airlock worker", "airlock"],
    ["bareMiB", "bare process", "floor"],
  ]);
  pairs("import", "(h) CLI start (lower is better)", "ms", [
    ["importMs", "importing airlock", "airlock"],
    ["emptyMs", "empty script", "floor"],
  ]);

  const width = 960;
  const labelWidth = 360;
  const barArea = 470;
  const barHeight = 16;
  const gap = 5;
  const colors = { airlock: "#2563eb", floor: "#6b7280", peer: "#f59e0b" };
  const out: string[] = [];
  let y = 80;
  for (const panel of panels) {
    out.push(
      `<text x="16" y="${y}" font-size="15" font-weight="bold">${
        escapeXml(panel.title)
      }</text>`,
    );
    y += 10;
    const max = Math.max(...panel.bars.map((bar) => bar.value));
    for (const bar of panel.bars) {
      const w = max > 0 ? Math.max(1, (bar.value / max) * barArea) : 1;
      out.push(
        `<text x="${labelWidth - 8}" y="${
          y + barHeight - 4
        }" font-size="12" text-anchor="end">${escapeXml(bar.label)}</text>`,
        `<rect x="${labelWidth}" y="${y}" width="${
          w.toFixed(1)
        }" height="${barHeight}" fill="${colors[bar.kind]}"/>`,
        `<text x="${(labelWidth + w + 6).toFixed(1)}" y="${
          y + barHeight - 4
        }" font-size="12">${
          escapeXml(`${fmt(bar.value, bar.value < 100 ? 1 : 0)} ${panel.unit}`)
        }</text>`,
      );
      y += barHeight + gap;
    }
    y += 30;
  }
  const legend = [
    ["airlock", colors.airlock],
    ["floor / limit / bare", colors.floor],
    ["peer", colors.peer],
  ].map(([name, color], i) =>
    `<rect x="${16 + i * 190}" y="${
      y - 12
    }" width="12" height="12" fill="${color}"/><text x="${32 + i * 190}" y="${
      y - 2
    }" font-size="12">${name}</text>`
  ).join("");
  const height = y + 10;
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif">
<rect width="100%" height="100%" fill="#ffffff"/>
<text x="16" y="28" font-size="18" font-weight="bold">airlock benchmarks, medians of ${env.rounds} rounds, ${
    escapeXml(env.date.slice(0, 10))
  }</text>
<text x="16" y="44" font-size="12" fill="#374151">${
    escapeXml(
      `${
        env.deno.split(" (")[0]
      }, ${env.bun}, ${env.node}; ${env.cpu}, ${env.cores} cores. Drawn by scripts/bench/main.ts.`,
    )
  }</text>
${out.join("\n")}
${legend}
</svg>
`;
}
