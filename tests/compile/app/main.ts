// deno-lint-ignore-file no-console
// A program that uses airlock, built into one executable by
// tests/compile/compile_test.ts (bun build --compile main.ts
// workers/probe_worker.ts) or run with AIRLOCK_SELF_EXEC=1. It prints one
// JSON report on stdout. Argument: a file outside the worker's grants.
import process from "node:process";
import { RemoteError, session, WorkerCrashedError } from "../../../mod.ts";
import type probe from "./workers/probe_worker.ts";

const outside = process.argv[2] ?? "/etc/hostname";
const log: string[] = [];
const s = await session<typeof probe>(
  new URL("./workers/probe_worker.ts", import.meta.url),
  {
    // BUN_BE_BUN would turn the executable into the bun command line.
    env: { GREETING: "hello", BUN_BE_BUN: "1" },
    permissions: { env: true },
    onStderr: (line) => log.push(line),
  },
);
try {
  // The pid airlock reports: the worker's own process.pid is its pid inside the
  // sandbox's pid namespace.
  const worker = { ...await s.info(), pid: s.pid };
  const refused = await s.readText(outside).then(
    () => null,
    (error: unknown) =>
      error instanceof RemoteError
        ? { name: error.name, code: error.code ?? null }
        : { name: String(error), code: null },
  );
  const crashed = await s.die().then(
    () => null,
    (error: unknown) =>
      error instanceof WorkerCrashedError
        ? { name: error.name, signal: error.signal, pid: error.pid ?? null }
        : { name: String(error), signal: null, pid: null },
  );
  await s.info();
  const after = { pid: s.pid };
  console.log(JSON.stringify({
    parent: { pid: process.pid, execPath: process.execPath },
    worker,
    refused,
    crashed,
    after: { pid: after.pid },
  }));
} finally {
  await s.close();
}
