/**
 * The little the benchmark drivers need of the runtime they run on (Deno or
 * Bun): spawning with pipes through the same native API airlock's adapters
 * use (`Deno.Command`, `Bun.spawn`), timing a process to its exit, reading a
 * process's resident memory. Native members are typed here structurally.
 *
 * @module
 */

import { readFileSync } from "node:fs";

/** The runtimes the drivers run on. */
export type RuntimeName = "deno" | "bun";

interface BunSink {
  write(chunk: Uint8Array): number;
  flush(): number | Promise<number>;
  end(): number | Promise<number>;
}

interface BunChild {
  readonly pid: number;
  readonly stdin: BunSink;
  readonly stdout: ReadableStream<Uint8Array>;
  readonly exited: Promise<number>;
  kill(signal?: string): void;
}

interface BunLike {
  readonly version: string;
  readonly argv: string[];
  spawn(
    argv: string[],
    options: {
      stdin: "pipe" | "ignore";
      stdout: "pipe" | "ignore";
      stderr: "inherit" | "ignore";
      env?: Record<string, string>;
      detached?: boolean;
    },
  ): BunChild;
}

interface NodeProcessLike {
  readonly execPath: string;
  readonly env: Record<string, string | undefined>;
  exit(code: number): never;
  cwd(): string;
}

function bunGlobal(): BunLike | undefined {
  return (globalThis as { Bun?: BunLike }).Bun;
}

function nodeProcess(): NodeProcessLike {
  return (globalThis as unknown as { process: NodeProcessLike }).process;
}

/**
 * The runtime this script runs on.
 *
 * @returns `"bun"` or `"deno"`.
 */
export function runtimeName(): RuntimeName {
  return bunGlobal() ? "bun" : "deno";
}

/**
 * The runtime's version.
 *
 * @returns For example `"2.9.6"`.
 */
export function runtimeVersion(): string {
  return bunGlobal()?.version ?? Deno.version.deno;
}

/**
 * The running runtime binary.
 *
 * @returns Its path.
 */
export function execPath(): string {
  return bunGlobal() ? nodeProcess().execPath : Deno.execPath();
}

/**
 * The script's arguments.
 *
 * @returns Arguments after the script path.
 */
export function scriptArgs(): string[] {
  const bun = bunGlobal();
  return bun ? bun.argv.slice(2) : [...Deno.args];
}

/**
 * An environment variable of this process.
 *
 * @param name The variable.
 * @returns Its value.
 */
export function envVar(name: string): string | undefined {
  return bunGlobal() ? nodeProcess().env[name] : Deno.env.get(name);
}

/**
 * Ends this process.
 *
 * @param code Exit code.
 * @returns Never.
 */
export function exit(code: number): never {
  return bunGlobal() ? nodeProcess().exit(code) : Deno.exit(code);
}

/**
 * The argv that runs a script on this runtime (`deno run -A x` or `bun x`).
 *
 * @param script The script's path.
 * @param args Its arguments.
 * @returns The argv.
 */
export function scriptArgv(script: string, args: string[] = []): string[] {
  return runtimeName() === "bun"
    ? [execPath(), script, ...args]
    : [execPath(), "run", "-A", script, ...args];
}

/** A child with piped stdin and stdout, as airlock's adapter drives one. */
export interface PipedChild {
  /** Its pid. */
  readonly pid: number;
  /** Its stdout. */
  readonly stdout: ReadableStream<Uint8Array>;
  /** Writes bytes to its stdin. */
  write(bytes: Uint8Array): Promise<void>;
  /** Closes its stdin. */
  closeStdin(): Promise<void>;
  /** Settles with the exit code. */
  readonly exited: Promise<number>;
  /** SIGKILLs it. */
  kill(): void;
}

/**
 * Spawns with piped stdin and stdout (stderr inherited), in its own process
 * group and session as airlock's adapters spawn (which also decides how the
 * scheduler places the two processes), writing the way the runtime's
 * airlock adapter writes (a stream writer on Deno, a file sink with a flush
 * on Bun).
 *
 * @param argv Program and arguments.
 * @param env Extra environment variables.
 * @returns The child.
 */
export function spawnPiped(
  argv: string[],
  env: Record<string, string> = {},
): PipedChild {
  const bun = bunGlobal();
  if (bun) {
    const child = bun.spawn(argv, {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "inherit",
      env: { ...nodeProcess().env as Record<string, string>, ...env },
      detached: true,
    });
    return {
      pid: child.pid,
      stdout: child.stdout,
      async write(bytes) {
        child.stdin.write(bytes);
        await child.stdin.flush();
      },
      async closeStdin() {
        await child.stdin.end();
      },
      exited: child.exited,
      kill: () => child.kill("SIGKILL"),
    };
  }
  const [program, ...args] = argv;
  const child = new Deno.Command(program as string, {
    args,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
    env,
    detached: true,
  }).spawn();
  const writer = child.stdin.getWriter();
  return {
    pid: child.pid,
    stdout: child.stdout,
    write: (bytes) => writer.write(bytes),
    closeStdin: () => writer.close(),
    exited: child.status.then((status) => status.code),
    kill() {
      try {
        child.kill("SIGKILL");
      } catch {
        // Already gone.
      }
    },
  };
}

/**
 * Runs a program with no stdio to its exit.
 *
 * @param argv Program and arguments.
 * @param env The whole environment of the program (default: this
 *   process's).
 * @returns The exit code.
 */
export async function runQuiet(
  argv: string[],
  env?: Record<string, string>,
  extraInput?: Uint8Array,
): Promise<number> {
  if (extraInput !== undefined) {
    // Descriptor 3 carries bytes: only airlock's adapter spawns so.
    const { detect } = await import("../../src/runtime/detect.ts");
    const child = detect().spawn({
      argv,
      env: env ?? {},
      cwd: nodeProcess().cwd(),
      extraInput,
    });
    child.closeStdin();
    await Promise.all([child.stdout.cancel(), child.stderr.cancel()]);
    return (await child.exited).code ?? -1;
  }
  const bun = bunGlobal();
  if (bun) {
    return await bun.spawn(argv, {
      stdin: "ignore",
      stdout: "ignore",
      stderr: "ignore",
      ...(env ? { env } : {}),
    }).exited;
  }
  const [program, ...args] = argv;
  const status = await new Deno.Command(program as string, {
    args,
    stdin: "null",
    stdout: "null",
    stderr: "null",
    ...(env ? { env, clearEnv: true } : {}),
  }).output();
  return status.code;
}

/**
 * Resident memory of a process (VmRSS), from /proc.
 *
 * @param pid The process.
 * @returns Bytes, or NaN when it cannot be read.
 */
export function rssBytes(pid: number): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const match = /VmRSS:\s+(\d+)\s+kB/.exec(status);
    return match ? Number(match[1]) * 1024 : NaN;
  } catch {
    return NaN;
  }
}

/**
 * CPU time a process has used so far (user + system, all threads), from
 * /proc, in milliseconds (10 ms resolution).
 *
 * @param pid The process, or `"self"`.
 * @returns Milliseconds, or NaN when it cannot be read.
 */
export function cpuMs(pid: number | "self"): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return NaN;
  }
}
