// Importing @airlock/airlock loads only the public API and what option
// validation and calls need: the launch code (src/runtime/launch/, the OS
// sandbox in src/runtime/sandbox/, the code cache, the Bun entry) and the
// connection to a worker (src/parent/connection.ts, with the decoder and the
// start errors' hints) load on the first start
// (src/parent/_launch.ts) and the worker side only in a self-exec
// worker (mod.ts), through dynamic imports with literal specifiers, so
// `deno compile`, `deno publish` and Bun's bundler still include them.
// Row (h) of scripts/bench measures the cost; this keeps the cut from
// silently regressing. Runs under both runners: it runs `deno info`.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import process from "node:process";
import { fixture } from "../_helpers/files.ts";

const root = fileURLToPath(new URL("../../", import.meta.url));
const local = join(root, "node_modules", ".bin", "deno");
const deno = existsSync(local) ? local : "deno";
const localBun = join(root, "node_modules", ".bin", "bun");
const bun = existsSync(localBun) ? localBun : "bun";

interface InfoDependency {
  specifier: string;
  code?: { specifier: string };
  isDynamic?: boolean;
}

interface InfoModule {
  specifier: string;
  dependencies?: InfoDependency[];
}

function moduleGraph(entry: string): Map<string, InfoModule> {
  const info = JSON.parse(
    execFileSync(deno, ["info", "--json", join(root, entry)], {
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1" },
    }),
  ) as { modules: InfoModule[] };
  return new Map(info.modules.map((module) => [module.specifier, module]));
}

/** The modules loaded by importing `entry`: static imports only. */
function staticGraph(graph: Map<string, InfoModule>, entry: string): string[] {
  const seen = new Set<string>();
  const visit = (specifier: string): void => {
    if (seen.has(specifier) || !graph.has(specifier)) return;
    seen.add(specifier);
    for (const dep of graph.get(specifier)?.dependencies ?? []) {
      if (dep.code && !dep.isDynamic) visit(dep.code.specifier);
    }
  };
  visit(pathToFileURL(join(root, entry)).href);
  return [...seen].map((specifier) =>
    specifier.startsWith("file:")
      ? fileURLToPath(specifier).slice(root.length).replaceAll("\\", "/")
      : specifier
  );
}

/** Code that a program importing airlock must not load until it starts a worker. */
const LOADED_LATER = [
  /^src\/runtime\/launch\/(?!types\.ts$)/,
  // Its types modules (the sandbox's, limits') are what option validation needs.
  /^src\/runtime\/sandbox\/(?!(?:[a-z_]+\/)?types\.ts$)/,
  /^src\/runtime\/bun_entry\.ts$/,
  /^src\/worker\//,
  /^src\/parent\/connection\.ts$/,
  /^src\/parent\/_start_worker\.ts$/,
  /^src\/parent\/_start_error\.ts$/,
  /^src\/parent\/_hints\.ts$/,
  // The reading side: a parent reads frames only once a worker runs.
  /^src\/protocol\/decode_value\.ts$/,
  /^src\/protocol\/frame_reader\.ts$/,
  /^src\/parent\/_log\.ts$/,
];

describe("the module graph of mod.ts", () => {
  const graph = moduleGraph("mod.ts");
  const eager = staticGraph(graph, "mod.ts");

  test("importing it loads no launch, confinement, connection or worker code", () => {
    assert.ok(eager.includes("src/parent/_launch.ts"), eager.join("\n"));
    assert.deepEqual(
      eager.filter((path) =>
        LOADED_LATER.some((pattern) => pattern.test(path))
      ),
      [],
    );
  });

  test("the code loaded later is still in the graph (compile, publish)", () => {
    const all = [...graph.keys()].map((specifier) =>
      specifier.startsWith("file:")
        ? fileURLToPath(specifier).slice(root.length).replaceAll("\\", "/")
        : specifier
    );
    for (
      const path of [
        "src/runtime/launch/command.ts",
        "src/runtime/launch/warm_up.ts",
        "src/runtime/launch/exit.ts",
        "src/runtime/sandbox/plan.ts",
        "src/runtime/sandbox/facts.ts",
        "src/runtime/sandbox/wrappers.ts",
        "src/parent/connection.ts",
        "src/parent/_start_worker.ts",
        "src/protocol/decode_value.ts",
        "src/worker/main.ts",
        "src/worker/stdout_guard.ts",
      ]
    ) {
      assert.ok(all.includes(path), `${path} is not in mod.ts's graph`);
      assert.ok(!eager.includes(path), `${path} loads at import`);
    }
  });
});

describe("importing mod.ts on Deno", () => {
  test("touches no global that Deno builds on first use", () => {
    const out = execFileSync(
      deno,
      ["run", "--quiet", fixture("import_globals_trap.ts").pathname],
      { encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } },
    );
    assert.deepEqual(JSON.parse(out), {});
  });
});

describe("importing mod.ts on Bun", () => {
  // A lazy load must never be a top-level await that runs at import: Bun's
  // require() of a module whose evaluation awaits fails.
  test("a CommonJS program can require() it", () => {
    const out = execFileSync(bun, [fixture("require_mod.cjs").pathname], {
      encoding: "utf8",
      env: { ...process.env, NO_COLOR: "1" },
    });
    assert.equal(out.trim(), "function");
  });
});
