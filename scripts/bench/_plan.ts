/**
 * What the benchmark measures: the scenarios, their contenders (airlock, the
 * floor, the peers), how many iterations each gets, and the targets of issue
 * 6. Pure data, shared by main.ts (which runs it) and _report.ts (which
 * writes it up).
 *
 * @module
 */

/** Where a contender runs. */
export type Host = "deno" | "bun" | "node" | "c";

/** The scenarios, by the letter the issue gives them. */
export type ScenarioId =
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

/** One program run per round. */
export interface Job {
  /** Stable key: `<scenario>/<host>/<contender>`. */
  key: string;
  /** The scenario. */
  scenario: ScenarioId;
  /** Where it runs. */
  host: Host;
  /** The contender's id (driver.ts, node_ipc.mjs, tinypool_pool.mjs or pingpong). */
  contender: string;
  /** Its label in the report. */
  label: string;
  /** The JSON config handed to the program. */
  config: Record<string, unknown>;
  /**
   * Where its processes run: left to the scheduler (unset), all on core 0
   * (`"one-core"`), or this side on core 0 and the other on core 1
   * (`"two-cores"`).
   */
  placement?: Placement;
}

/** Pinned placements of the round-trip scenario. */
export type Placement = "one-core" | "two-cores";

/** Sizes of the binary round trip, in MiB. */
export const BINARY_SIZES_MIB: readonly number[] = [1, 16, 64];

/** Run settings for a full run and for `--smoke`. */
export interface Settings {
  /** Rounds per scenario (medians are over rounds). */
  rounds: number;
  /** Whether this is the smoke run. */
  smoke: boolean;
}

/**
 * The jobs of one scenario, in the order each round runs them.
 *
 * @param scenario The scenario.
 * @param runtimes The runtimes airlock is measured on.
 * @param settings Full or smoke.
 * @returns The jobs.
 */
export function jobsOf(
  scenario: ScenarioId,
  runtimes: readonly ("deno" | "bun")[],
  settings: Settings,
): Job[] {
  const smoke = settings.smoke;
  const jobs: Job[] = [];
  const add = (
    host: Host,
    contender: string,
    label: string,
    config: Record<string, unknown>,
  ): void => {
    jobs.push({
      key: `${scenario}/${host}/${contender}`,
      scenario,
      host,
      contender,
      label,
      config: { scenario, contender, ...config },
    });
  };
  const pin = (
    placement: Placement,
    host: Host,
    contender: string,
    label: string,
    config: Record<string, unknown>,
  ): void => {
    add(
      host,
      contender,
      `${label}, ${placement === "one-core" ? "one core" : "two cores"}`,
      { ...config, ...(placement === "two-cores" ? { split: true } : {}) },
    );
    const job = jobs[jobs.length - 1] as Job;
    job.key += `/${placement}`;
    job.placement = placement;
  };
  const name = (runtime: string): string => runtime === "deno" ? "Deno" : "Bun";
  switch (scenario) {
    case "rtt": {
      const config = smoke
        ? { warmup: 20, iterations: 50 }
        : { warmup: 2000, iterations: 5000 };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(runtime, "airlock", `airlock session (${rt})`, config);
        add(
          runtime,
          "airlock-watch",
          `airlock session, watch 1 path (${rt})`,
          config,
        );
        add(runtime, "floor", `floor: hand-written stdio loop (${rt})`, config);
        if (runtime === "deno") {
          add(
            runtime,
            "floor-async",
            "hand-written loop, async stdout.write (Deno)",
            config,
          );
        }
      }
      if (runtimes.includes("bun")) {
        add("bun", "bun-ipc-json", "Bun.spawn ipc, json", config);
        add("bun", "bun-ipc-advanced", "Bun.spawn ipc, advanced", config);
      }
      add("node", "node-ipc-json", "Node fork ipc, json", {
        ...config,
        serialization: "json",
      });
      add("node", "node-ipc-advanced", "Node fork ipc, advanced", {
        ...config,
        serialization: "advanced",
      });
      add("c", "pingpong", "C pipe ping-pong (machine limit)", config);
      // The same pinned: on one core (no cross-core wake-ups, so what
      // remains is the CPU work of a round trip) and split over two cores
      // (every round trip pays two cross-core wake-ups). Left alone, the
      // scheduler picks either, per process pair; pinned, both are steady.
      for (const placement of ["one-core", "two-cores"] as const) {
        for (const runtime of runtimes) {
          const rt = name(runtime);
          pin(placement, runtime, "airlock", `airlock session (${rt})`, config);
          pin(
            placement,
            runtime,
            "floor",
            `floor: hand-written stdio loop (${rt})`,
            config,
          );
        }
        if (runtimes.includes("bun")) {
          pin(placement, "bun", "bun-ipc-json", "Bun.spawn ipc, json", config);
        }
        pin(
          placement,
          "c",
          "pingpong",
          "C pipe ping-pong (machine limit)",
          config,
        );
      }
      break;
    }
    case "throughput": {
      const config = smoke
        ? { warmup: 100, iterations: 300, inflight: 64 }
        : { warmup: 5000, iterations: 30000, inflight: 64 };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(runtime, "airlock", `airlock session (${rt})`, config);
        add(runtime, "floor", `floor: hand-written stdio loop (${rt})`, config);
      }
      if (runtimes.includes("bun")) {
        add("bun", "bun-ipc-json", "Bun.spawn ipc, json", config);
        add("bun", "bun-ipc-advanced", "Bun.spawn ipc, advanced", config);
      }
      add("node", "node-ipc-json", "Node fork ipc, json", {
        ...config,
        scenario: "throughput",
        serialization: "json",
      });
      add("node", "node-ipc-advanced", "Node fork ipc, advanced", {
        ...config,
        scenario: "throughput",
        serialization: "advanced",
      });
      break;
    }
    case "binary": {
      const config = smoke
        ? { warmup: 1, iterations: 1, sizesMiB: [1] }
        : { warmup: 4, iterations: 8, sizesMiB: BINARY_SIZES_MIB };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(runtime, "airlock", `airlock session (${rt})`, config);
        add(runtime, "floor", `floor: hand-written stdio loop (${rt})`, config);
        add(runtime, "pipe-read", `raw pipe read, child to parent (${rt})`, {
          ...config,
          warmup: 1,
          iterations: smoke ? 1 : 3,
        });
      }
      break;
    }
    case "rich": {
      const config = smoke
        ? { warmup: 1, iterations: 2, rows: 1000 }
        : { warmup: 20, iterations: 50, rows: 1000 };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(runtime, "airlock", `airlock session round trip (${rt})`, config);
        add(
          runtime,
          "codec",
          `airlock codec alone, encode + decode (${rt})`,
          config,
        );
        add(
          runtime,
          "superjson",
          `superjson alone, stringify + parse (${rt})`,
          config,
        );
      }
      break;
    }
    case "start": {
      const config = smoke
        ? { warmup: 0, iterations: 2 }
        : { warmup: 2, iterations: 10 };
      for (const runtime of runtimes) {
        add(
          runtime,
          "start",
          `one-shot call vs bare start (${name(runtime)})`,
          config,
        );
      }
      for (const runtime of runtimes) {
        // oneShot({ spares: 1 }): the call takes a process started and
        // imported ahead (it has the bare starts of the round to get ready).
        add(
          runtime,
          "start-spare",
          `one-shot call with a spare ready (${name(runtime)})`,
          { ...config, spares: 1 },
        );
      }
      for (const runtime of runtimes) {
        // Every limit set (a memory group and prlimit besides the default
        // pids group): what the limits step adds is the last columns.
        add(
          runtime,
          "start-limits",
          `one-shot call with every limit (${name(runtime)})`,
          { ...config, limits: true },
        );
      }
      if (runtimes.includes("bun")) {
        // Bun workers run in the OS sandbox by default (Bun has no permission
        // model); this shows what the sandbox adds to the start.
        add(
          "bun",
          "start-nosandbox",
          'one-shot call, permissions "all", so no sandbox (Bun)',
          {
            ...config,
            permissionsAll: true,
          },
        );
      }
      break;
    }
    case "pool": {
      const config = smoke
        ? { warmup: 20, iterations: 50 }
        : { warmup: 200, iterations: 1000 };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(runtime, "pool", `airlock pool of 2 (${rt})`, {
          ...config,
          maxTasksPerWorker: 0,
        });
        add(
          runtime,
          "pool-recycle",
          `airlock pool of 2, maxTasksPerWorker 100 (${rt})`,
          {
            ...config,
            maxTasksPerWorker: 100,
          },
        );
        // The same two pools with calls paced one every 2 ms: the shape of
        // a service, where a recycled worker's replacement can start ahead.
        add(runtime, "pool-paced", `airlock pool of 2, paced (${rt})`, {
          ...config,
          maxTasksPerWorker: 0,
          paceMs: 2,
        });
        add(
          runtime,
          "pool-recycle-paced",
          `airlock pool of 2, maxTasksPerWorker 100, paced (${rt})`,
          {
            ...config,
            maxTasksPerWorker: 100,
            paceMs: 2,
          },
        );
        add(
          runtime,
          "pool-concurrent",
          `airlock pool of 2, concurrency 16 (${rt})`,
          {
            ...config,
            maxTasksPerWorker: 0,
            concurrency: 16,
          },
        );
      }
      add(
        "node",
        "tinypool",
        "tinypool 2.2.0, child_process runtime, 2 workers",
        {
          warmup: config.warmup,
          calls: config.iterations,
        },
      );
      break;
    }
    case "memory": {
      for (const runtime of runtimes) {
        add(
          runtime,
          "memory",
          `idle worker vs bare process (${name(runtime)})`,
          {},
        );
      }
      break;
    }
    case "stream": {
      const config = smoke
        ? { warmup: 0, iterations: 1, rows: 10_000 }
        : { warmup: 1, iterations: 3, rows: 1_000_000 };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(
          runtime,
          "airlock-stream",
          `airlock stream, for await (${rt})`,
          config,
        );
        add(
          runtime,
          "airlock-array",
          `airlock, the same rows in one array (${rt})`,
          config,
        );
      }
      break;
    }
    case "events": {
      // The tracing channel's cost per call: its checks alone (nobody
      // subscribed) and the whole trace of a call (a no-op subscriber).
      const config = smoke
        ? { warmup: 1_000, iterations: 10_000 }
        : { warmup: 200_000, iterations: 2_000_000 };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(
          runtime,
          "events-off",
          `airlock:call, no subscriber (${rt})`,
          config,
        );
        add(runtime, "events-on", `airlock:call, a subscriber (${rt})`, {
          ...config,
          iterations: config.iterations / 10,
        });
        add(runtime, "metrics", `stats() timing figures (${rt})`, config);
      }
      break;
    }
    case "net": {
      // A sandboxed worker's TCP client to an echo server: the host's
      // network (net: true) against a host:port grant, forwarded.
      const config = smoke
        ? { warmup: 10, iterations: 50, bytesMiB: 4 }
        : { warmup: 500, iterations: 3000, bytesMiB: 64 };
      for (const runtime of runtimes) {
        const rt = name(runtime);
        add(runtime, "net-direct", `TCP, net: true (${rt})`, config);
        add(
          runtime,
          "net-forwarded",
          `TCP, a host:port grant, forwarded (${rt})`,
          config,
        );
      }
      break;
    }
    case "import": {
      const config = smoke
        ? { warmup: 0, iterations: 2 }
        : { warmup: 2, iterations: 10 };
      for (const runtime of runtimes) {
        add(
          runtime,
          "import",
          `CLI importing airlock vs empty (${name(runtime)})`,
          config,
        );
      }
      break;
    }
    case "cli": {
      const config = smoke
        ? { warmup: 0, iterations: 2 }
        : { warmup: 1, iterations: 8 };
      for (const runtime of runtimes) {
        add(
          runtime,
          "cli",
          `CLI with one one-shot call vs spawning a hand-written worker (${
            name(runtime)
          })`,
          config,
        );
      }
      break;
    }
  }
  // driver.ts knows these as variants of one contender, with a setting.
  for (const job of jobs) {
    if (job.contender.startsWith("pool-")) job.config.contender = "pool";
    if (job.contender === "start-nosandbox") job.config.contender = "start";
    if (job.contender === "start-spare") job.config.contender = "start";
    if (job.contender === "start-limits") job.config.contender = "start";
  }
  return jobs;
}

/** Every scenario, in report order. */
export const SCENARIOS: readonly ScenarioId[] = [
  "rtt",
  "throughput",
  "binary",
  "rich",
  "start",
  "pool",
  "memory",
  "import",
  "cli",
  "stream",
  "events",
  "net",
];
