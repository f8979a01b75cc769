/**
 * Process facts read from the OS: resident memory, and whether a pid is
 * alive; and sending a process a signal. Linux reads /proc; elsewhere `ps` is not consulted and the figures
 * are `undefined`.
 *
 * @module
 */

import {
  process,
  readdirSync,
  readFileSync,
  readlinkSync,
} from "./node_builtins.ts";

/**
 * Resident memory of a process, the OS figure (VmRSS), which includes what
 * native code allocates outside the JavaScript heap.
 *
 * @param pid The process.
 * @returns Bytes, or `undefined` when it cannot be read.
 */
export function readRssBytes(pid: number): number | undefined {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const match = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    return match?.[1] ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Why this process cannot read the resident memory of its workers, if it
 * cannot: not Linux, or a Deno parent without `--allow-all` (Deno lets a
 * program read `/proc` only with it).
 *
 * @returns The reason with its fix, or `undefined` when it can.
 */
export function rssUnreadable(): string | undefined {
  if (process.platform !== "linux") {
    return `it is read from /proc, which ${process.platform} does not have`;
  }
  try {
    readFileSync("/proc/self/status", "utf8");
    return undefined;
  } catch (error: unknown) {
    if ((error as { name?: unknown }).name === "NotCapable") {
      return "a Deno parent reads /proc/<pid>/status only with --allow-all (-A); run it with -A";
    }
    return `cannot read /proc/self/status (${
      error instanceof Error ? error.message : String(error)
    })`;
  }
}

/**
 * Whether a process is still running: it exists and is neither a zombie nor
 * dead (a process being torn down still holds its files until it is).
 *
 * @param pid The process.
 * @returns `false` once it is gone or a zombie, and where /proc cannot be read.
 */
export function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(
      stat.lastIndexOf(")") + 2,
      stat.lastIndexOf(")") + 3,
    );
    return state !== "Z" && state !== "X" && state !== "x";
  } catch {
    return false;
  }
}

/**
 * What a process's stdout is, as /proc names it (e.g. `"pipe:[4242]"`).
 *
 * @param pid The process.
 * @returns The name, or `undefined` when it cannot be read.
 */
export function stdoutTarget(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/fd/1`);
  } catch {
    return undefined;
  }
}

/**
 * Whether a process still holds a descriptor on a file (on any descriptor
 * number: a runtime may keep its own copy of stdout).
 *
 * @param pid The process.
 * @param target The file, as {@linkcode stdoutTarget} named it.
 * @returns Whether it does, or `undefined` when its descriptors cannot be read.
 */
export function holdsFile(pid: number, target: string): boolean | undefined {
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return undefined;
  }
  for (const fd of fds) {
    try {
      if (readlinkSync(`/proc/${pid}/fd/${fd}`) === target) return true;
    } catch {
      // Closed meanwhile.
    }
  }
  return false;
}

/**
 * Sends a signal to a process (for the test kit's fault injection).
 *
 * @param pid The process.
 * @param signal The signal's name, e.g. `"SIGSEGV"`.
 * @throws {Error} when there is no such process or signal, or it may not be
 * signalled.
 */
export function signalProcess(pid: number, signal: string): void {
  process.kill(pid, signal);
}
