/**
 * The contract between airlock and a JavaScript runtime: spawning workers
 * (parent side) and serving on stdin/stdout (worker side). One constant per
 * runtime implements it (`deno.ts`, `bun.ts`), so drift fails type-check.
 *
 * @module
 */

/** The runtimes airlock runs on and spawns. */
export type RuntimeName = "deno" | "bun";

/** How a process ended. */
export interface ExitStatus {
  /** The exit code, or `null` when a signal ended it. */
  code: number | null;
  /** The signal name (e.g. `"SIGKILL"`), or `null`. */
  signal: string | null;
}

/** What to spawn. */
export interface SpawnRequest {
  /** The program and its arguments. */
  argv: readonly string[];
  /** The whole environment of the child (nothing is inherited). */
  env: Readonly<Record<string, string>>;
  /** The working directory. */
  cwd: string;
  /**
   * Bytes the child reads on its descriptor 3, then end of file (the
   * native confine step, which bubblewrap makes into a file inside the
   * sandbox). Omitted: the child has no descriptor 3.
   */
  extraInput?: Uint8Array;
}

/** A spawned child process with piped stdio. */
export interface ChildHandle {
  /** The pid of the spawned process (a sandbox's pid when wrapped). */
  readonly pid: number;
  /** The child's stdout. */
  readonly stdout: ReadableStream<Uint8Array>;
  /** The child's stderr. */
  readonly stderr: ReadableStream<Uint8Array>;
  /** Settles once the process has exited; never rejects. */
  readonly exited: Promise<ExitStatus>;
  /**
   * Writes chunks to the child's stdin, in order after earlier writes.
   * Rejects when the pipe is closed.
   */
  write(chunks: readonly Uint8Array[]): Promise<void>;
  /** Closes the child's stdin (end-of-file for the worker). */
  closeStdin(): void;
  /** Signals the child's process group (the child alone if it has none). Never throws. */
  kill(signal: "SIGTERM" | "SIGKILL"): void;
  /** Whether the child keeps the parent's event loop alive. */
  setRef(ref: boolean): void;
}

/** The worker side's pipes. */
export interface WorkerStdio {
  /** The process's stdin, chunk by chunk. */
  readonly input: AsyncIterable<Uint8Array>;
  /** Writes chunks to stdout, in order after earlier writes. */
  write(chunks: readonly Uint8Array[]): Promise<void>;
}

/** One runtime, both sides. */
export interface RuntimeAdapter {
  /** The runtime's name. */
  readonly name: RuntimeName;
  /** Its version, e.g. `"2.9.6"`. */
  readonly version: string;
  /** The path of the running binary. */
  execPath(): string;
  /** This process's pid. */
  pid(): number;
  /** The command-line arguments after the script. */
  args(): string[];
  /** This process's parent pid. */
  ppid(): number;
  /** The current working directory. */
  cwd(): string;
  /** Reads one environment variable of this process (undefined if unset or not permitted). */
  env(name: string): string | undefined;
  /** This process's whole environment (empty if not permitted). */
  environment(): Record<string, string>;
  /** Spawns a child with piped stdio, in its own process group. Throws when the program cannot be started. */
  spawn(request: SpawnRequest): ChildHandle;
  /**
   * Loads, one part per turn of the event loop, what the first
   * {@linkcode RuntimeAdapter.spawn} of such a request would load in one
   * block (Deno: `node:child_process` and its sockets, for a spawn with
   * `extraInput`); resolves at once when there is nothing to load.
   * Optional: without it a spawn loads what it needs itself.
   */
  prepareSpawn?(request: SpawnRequest): Promise<void>;
  /** The worker side's stdin and stdout. */
  workerStdio(): WorkerStdio;
  /** Writes text to stderr without waiting (worker logs, never stdout). */
  writeStderr(text: string): void;
  /** Ends this process. */
  exit(code: number): never;
  /** Runs `callback` synchronously when this process exits normally. */
  onExit(callback: () => void): void;
  /**
   * The identity of a path for stale-state checks: device, inode and birth
   * time, `"-"` when it does not exist, `"?"` when it cannot be read.
   */
  pathIdentity(path: string): string;
}
