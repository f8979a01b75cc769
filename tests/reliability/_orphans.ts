/**
 * Runs tests/fixtures/reliability/orphan_parent.ts as a separate parent
 * process, SIGKILLs it, and measures how long its workers outlive it. Shared
 * by the parent-death tests and the soak script.
 *
 * @module
 */

import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { isAlive } from "../_helpers/processes.ts";

const FIXTURE = fileURLToPath(
  new URL("../fixtures/reliability/orphan_parent.ts", import.meta.url),
);

/** What the parent fixture printed once its workers were in place. */
export interface OrphanParentReport {
  /** The parent's pid. */
  pid: number;
  /** Its runtime. */
  runtime: "deno" | "bun";
  /** Its mode. */
  mode: string;
  /** Worker pids by role (from the hellos). */
  workers: Record<string, number>;
  /** Pids of the workers spinning in synchronous code. */
  spinning: number[];
  /** Each direct child of the parent, mapped to the thread that spawned it. */
  spawners: Record<string, number>;
}

/** One parent's death, measured. */
export interface OrphanTrial {
  /** What the parent reported. */
  report: OrphanParentReport;
  /** Every descendant of the parent just before the kill. */
  descendants: number[];
  /** Descendants still alive `deadlineMs` after the kill. */
  survivors: { pid: number; cmdline: string }[];
  /** Milliseconds from the kill until the last descendant was gone. */
  goneAfterMs: number;
  /** Milliseconds from spawning the parent to the kill. */
  ageMs: number;
  /** How the parent ended: the signal's name, or its exit code. */
  parentExit: string;
}

/**
 * Every descendant of a process, from /proc.
 *
 * @param root The process.
 * @returns Their pids.
 */
export function descendants(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // Gone meanwhile.
    }
  }
  const found: number[] = [];
  const walk = (pid: number): void => {
    for (const child of children.get(pid) ?? []) {
      found.push(child);
      walk(child);
    }
  };
  walk(root);
  return found;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").join(" ")
      .slice(0, 160);
  } catch {
    return "";
  }
}

/** A started parent fixture, its workers in place. */
export interface OrphanParent {
  /** What it reported. */
  report: OrphanParentReport;
  /** When it was spawned (ms since the epoch). */
  startedAt: number;
  /**
   * Sends it a signal (default SIGKILL) and measures its workers' deaths;
   * a parent a catchable signal leaves alive past the deadline is then
   * SIGKILLed too.
   */
  kill(
    deadlineMs: number,
    signal?: "SIGKILL" | "SIGTERM" | "SIGINT" | "SIGHUP",
  ): Promise<OrphanTrial>;
}

/**
 * Starts the parent fixture on this runtime and waits for its report.
 *
 * @param mode "default", "fallback" or "late".
 * @param env Extra environment variables.
 * @returns The parent.
 */
export async function startOrphanParent(
  mode: string,
  env: Record<string, string> = {},
): Promise<OrphanParent> {
  const runtimeBun = typeof (globalThis as { Bun?: unknown }).Bun === "object";
  const args = runtimeBun
    ? [FIXTURE, mode]
    : ["run", "-A", "--quiet", FIXTURE, mode];
  const startedAt = Date.now();
  const child = spawn(process.execPath, args, {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NO_COLOR: "1", ...env },
  });
  const exited = new Promise<string>((resolve) =>
    child.on("exit", (code, signal) => resolve(signal ?? `exit ${code}`))
  );
  let stderr = "";
  child.stderr.on("data", (data: Uint8Array) => {
    stderr = (stderr + new TextDecoder().decode(data)).slice(-4000);
  });
  const report = await new Promise<OrphanParentReport>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`orphan parent did not report within 120 s: ${stderr}`));
    }, 120_000);
    child.stdout.on("data", (data: Uint8Array) => {
      out += new TextDecoder().decode(data);
      const line = out.split("\n").find((l) => l.startsWith("{"));
      if (line && out.includes("\n")) {
        clearTimeout(timer);
        resolve(JSON.parse(line) as OrphanParentReport);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`orphan parent exited with ${code}: ${stderr}`));
    });
  });
  return {
    report,
    startedAt,
    async kill(deadlineMs, signal = "SIGKILL") {
      const before = descendants(report.pid);
      const ageMs = Date.now() - startedAt;
      process.kill(report.pid, signal);
      const killedAt = performance.now();
      let alive = before.filter(isAlive);
      while (alive.length > 0 && performance.now() - killedAt < deadlineMs) {
        await new Promise((resolve) => setTimeout(resolve, 5));
        alive = alive.filter(isAlive);
      }
      const goneAfterMs = Math.round(performance.now() - killedAt);
      const survivors = alive.map((pid) => ({ pid, cmdline: cmdline(pid) }));
      for (const { pid } of survivors) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // Gone.
        }
      }
      if (isAlive(report.pid)) process.kill(report.pid, "SIGKILL");
      const parentExit = await exited;
      return {
        report,
        descendants: before,
        survivors,
        goneAfterMs,
        ageMs,
        parentExit,
      };
    },
  };
}
