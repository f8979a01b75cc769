/**
 * How the sandbox's probes run (facts.ts): to their end, blocking, for a
 * synchronous caller with nothing prefetched, or without blocking the
 * event loop (the prefetch). Private to the sandbox folder.
 *
 * @module
 */

import { spawn, spawnSync } from "../node_builtins.ts";

/** What a probe's process did: the fields of `spawnSync`'s result it reads. */
export interface ProbeRun {
  /** Its exit code, or `null` when a signal ended it. */
  status: number | null;
  /** The signal that ended it, if any. */
  signal: string | null;
  /** What it wrote on stdout. */
  stdout: string;
  /** What it wrote on stderr. */
  stderr: string;
  /** Why it could not be run, if so. */
  error?: Error;
}

/** A probe's command, its environment and working directory. */
export interface ProbeCommand {
  /** The command line. */
  argv: readonly string[];
  /** The whole environment. */
  env: Record<string, string>;
  /** The working directory, if set. */
  cwd?: string;
  /** Bytes for the probe's stdin (then end of file); omitted: no stdin. */
  input?: Uint8Array;
}

/** How long a probe may run before it counts as failed. */
export const PROBE_TIMEOUT_MS = 30_000;

/**
 * Thrown by a probe asked for its cached answer only (a prefetch) when it
 * has none: `run()` makes the probe without blocking and caches it.
 */
export class ProbeNeeded {
  /**
   * @param run Makes the probe and caches its answer.
   */
  constructor(readonly run: () => Promise<void>) {}
}

/**
 * Runs a probe to its end, blocking (the fallback when nothing prefetched
 * it).
 *
 * @param command The probe.
 * @returns What it did.
 */
export function runProbeSync(command: ProbeCommand): ProbeRun {
  const result = spawnSync(command.argv[0] as string, command.argv.slice(1), {
    env: command.env,
    encoding: "utf8",
    stdio: [command.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
    ...(command.input === undefined ? {} : { input: command.input }),
    timeout: PROBE_TIMEOUT_MS,
    ...(command.cwd === undefined ? {} : { cwd: command.cwd }),
  });
  return {
    status: result.status,
    signal: result.signal,
    stdout: String(result.stdout ?? ""),
    stderr: String(result.stderr ?? ""),
    ...(result.error ? { error: result.error } : {}),
  };
}

/**
 * Runs a probe to its end without blocking the event loop.
 *
 * @param command The probe.
 * @returns What it did (never rejects).
 */
export function runProbe(command: ProbeCommand): Promise<ProbeRun> {
  return new Promise((resolve) => {
    let stdout = "";
    let stderr = "";
    let error: Error | undefined;
    const child = spawn(command.argv[0] as string, command.argv.slice(1), {
      env: command.env,
      stdio: [command.input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
      ...(command.cwd === undefined ? {} : { cwd: command.cwd }),
    });
    if (command.input !== undefined) {
      // A probe gone before reading it fails on its own.
      child.stdin?.on("error", () => {});
      child.stdin?.end(command.input);
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), PROBE_TIMEOUT_MS);
    child.stdout?.setEncoding("utf8");
    child.stderr?.setEncoding("utf8");
    child.stdout?.on("data", (chunk: string) => stdout += chunk);
    child.stderr?.on("data", (chunk: string) => stderr += chunk);
    child.on("error", (cause: Error) => {
      error = cause;
      clearTimeout(timer);
      resolve({ status: null, signal: null, stdout, stderr, error });
    });
    child.on("close", (status: number | null, signal: string | null) => {
      clearTimeout(timer);
      resolve({
        status,
        signal,
        stdout,
        stderr,
        ...(error ? { error } : {}),
      });
    });
  });
}
