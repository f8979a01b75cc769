/**
 * Transports: how a worker that runs elsewhere is started and reached. A
 * {@linkcode WorkerTransport} starts the worker's command somewhere and
 * hands back its stdin, stdout, stderr, exit and a way to end it. The
 * `launcher` option takes one, or an argv prefix (`ssh host --`,
 * `docker exec -i box`), which is the transport
 * {@linkcode commandTransport} makes: a local process whose stdio is the
 * worker's. Either way the start goes through {@linkcode openTransport},
 * which turns what the transport hands back into the handle the connection
 * uses.
 *
 * @module
 */

import { WorkerStartError } from "../../errors.ts";
import { basename } from "../node_builtins.ts";
import type { ChildHandle, ExitStatus, RuntimeAdapter } from "../types.ts";
import { serialWriter } from "../_write_queue.ts";
import { exitThroughWrapper } from "./exit.ts";

/** What a transport is asked to start: the worker command airlock would run here. */
export interface TransportRequest {
  /**
   * The worker's program and arguments, as airlock would run them on this
   * machine: a `command` as given, or this machine's runtime binary,
   * airlock's `workers/entry.ts` and the module, by absolute path. The far
   * side must see those paths (see docs/remote.md).
   */
  readonly argv: readonly string[];
  /**
   * The environment airlock would give the worker (the `env` option,
   * `inheritEnv`, `NO_COLOR`). A transport passes on what its far side
   * can take (a container engine's exec takes an environment; Kubernetes'
   * exec does not: prefix `argv` with `env K=V`).
   */
  readonly env: Readonly<Record<string, string>>;
  /** The `cwd` option, resolved on this machine. */
  readonly cwd: string;
  /** The worker module (or command), for the transport's messages. */
  readonly module: string;
  /**
   * Aborted when airlock gives up on this start (`startTimeoutMs` passed):
   * stop connecting. A process handed back after that is ended at once.
   */
  readonly signal: AbortSignal;
}

/** A worker started by a transport: its stdio, its exit and how to end it. */
export interface TransportProcess {
  /**
   * The worker's stdin. airlock writes frames to it and closes it to end
   * the worker: the far side must pass that end-of-file on (it is how a
   * worker elsewhere learns its parent is gone).
   */
  readonly stdin: WritableStream<Uint8Array>;
  /** The worker's stdout: the frames it writes, as bytes. */
  readonly stdout: ReadableStream<Uint8Array>;
  /**
   * The worker's stderr (its log lines and crash output). Omitted: the
   * transport carries none.
   */
  readonly stderr?: ReadableStream<Uint8Array>;
  /**
   * Settles once the worker is gone, with its exit code, or the name of
   * the signal that ended it (e.g. `"SIGKILL"`). A rejection counts as an
   * exit with neither. After `kill("SIGKILL")` it must settle: airlock
   * counts the worker gone 5 s later if it has not.
   */
  readonly exited: Promise<{ code: number | null; signal: string | null }>;
  /**
   * Ends the worker: `"SIGTERM"` asks it to stop, `"SIGKILL"` forces it (a
   * transport with one way to end, closing its connection, does that for
   * both). A throw is ignored.
   */
  kill(signal: "SIGTERM" | "SIGKILL"): void;
  /**
   * A process of this machine that stands for the worker (a local client's
   * pid), reported until the worker's hello names its own. Omitted: 0.
   */
  readonly pid?: number;
  /**
   * Whether the transport keeps this process's event loop alive: airlock
   * lets go of an idle worker so that the program can exit. Omitted: the
   * transport decides alone.
   */
  setRef?(ref: boolean): void;
}

/**
 * Starts a worker somewhere and hands back its stdio, exit and a way to
 * end it: what the `launcher` option takes besides an argv prefix. A
 * programmatic transport needs no local CLI (the Kubernetes API's exec, a
 * container engine's API, a socket to an agent on another host).
 *
 * What airlock relies on: bytes, not a terminal, in both directions; the
 * end of stdin reaches the worker; `exited` settles once it is gone.
 * Limits and the OS sandbox are the far side's job (see docs/remote.md).
 *
 * @example A transport that runs the worker through `node:child_process`
 * ```ts ignore
 * import { spawn } from "node:child_process";
 * import { Readable, Writable } from "node:stream";
 * import { session, type WorkerTransport } from "@airlock/airlock";
 *
 * const local: WorkerTransport = {
 *   name: "child_process",
 *   start({ argv, env, cwd }) {
 *     const [program = "", ...args] = argv;
 *     const child = spawn(program, args, { env: { ...env }, cwd });
 *     return {
 *       stdin: Writable.toWeb(child.stdin) as WritableStream<Uint8Array>,
 *       stdout: Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>,
 *       stderr: Readable.toWeb(child.stderr) as ReadableStream<Uint8Array>,
 *       exited: new Promise((resolve) =>
 *         child.once("exit", (code, signal) => resolve({ code, signal }))
 *       ),
 *       kill: (signal) => child.kill(signal),
 *     };
 *   },
 * };
 * await using s = await session("./worker.ts", { launcher: local, sandbox: "none" });
 * ```
 */
export interface WorkerTransport {
  /**
   * A short name for messages (a start failure, a pool's launcher health),
   * e.g. `"k8s pod/db-0"`.
   */
  readonly name: string;
  /**
   * Starts the worker. A throw or rejection is a failed start
   * (`WorkerStartError`, `failure: "spawn"`, naming the transport).
   *
   * @param request What to run.
   * @returns The started worker.
   */
  start(
    request: TransportRequest,
  ): TransportProcess | Promise<TransportProcess>;
}

/** What the `launcher` option takes: an argv prefix or a transport. */
export type LauncherOption = readonly string[] | WorkerTransport;

/**
 * A launcher as the options resolve it: a non-empty argv prefix or a
 * transport. An empty prefix resolves to none (the worker runs here, in
 * the OS sandbox); the type keeps one from reaching the launch path, where
 * any launcher means the worker runs elsewhere, unsandboxed.
 */
export type ResolvedLauncher =
  | readonly [string, ...string[]]
  | WorkerTransport;

/** How long after `kill("SIGKILL")` a transport's worker counts as gone. */
export const KILL_SETTLE_MS = 5_000;

/**
 * Whether a launcher hands the worker command to a remote shell as one line
 * (ssh joins the arguments after the host with spaces), so that each
 * argument must be quoted. `docker exec`, `kubectl exec` and the like pass
 * the argv through as it is.
 *
 * @param prefix The launcher prefix.
 * @returns Whether the worker argv is shell-quoted.
 */
export function launcherUsesShell(prefix: readonly string[]): boolean {
  return basename(prefix[0] ?? "") === "ssh";
}

/**
 * Quotes one argument for a POSIX shell: unchanged when it holds only
 * characters no shell treats specially, else in single quotes (a single
 * quote inside becomes `'\''`).
 *
 * @param arg The argument.
 * @returns The argument as a shell word.
 *
 * @example
 * ```ts
 * import { shellQuote } from "./transport.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(shellQuote("/usr/bin/deno"), "/usr/bin/deno");
 * assert.equal(shellQuote("it's"), `'it'\\''s'`);
 * ```
 */
export function shellQuote(arg: string): string {
  if (/^[A-Za-z0-9_@%+:,./-]+$/.test(arg)) return arg;
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * The transport of an argv prefix (`ssh host --`, `docker exec -i box`):
 * spawns `[...prefix, ...argv]` here, with the request's environment and
 * directory (they apply to the local launcher process), quoting each
 * argument for the remote shell when the program is `ssh`. Its exit is
 * the worker's, a `128 + N` code turned back into signal N (ssh, docker
 * and kubectl report a command killed by a signal so).
 *
 * @param prefix The prefix (non-empty).
 * @param spawn The parent runtime's spawn.
 * @returns The transport.
 */
export function commandTransport(
  prefix: readonly string[],
  spawn: RuntimeAdapter["spawn"],
): WorkerTransport {
  const shell = launcherUsesShell(prefix);
  return {
    name: prefix.join(" "),
    start(request) {
      const argv = [
        ...prefix,
        ...(shell ? request.argv.map(shellQuote) : request.argv),
      ];
      let child: ChildHandle;
      try {
        child = spawn({ argv, env: request.env, cwd: request.cwd });
      } catch (error: unknown) {
        throw new WorkerStartError({
          module: request.module,
          failure: "spawn",
          detail: `cannot spawn "${prefix[0] ?? ""}": ${
            error instanceof Error ? error.message : String(error)
          }`,
          cause: error,
        });
      }
      return processOf(child);
    },
  };
}

/** A spawned child as a transport's process. */
function processOf(child: ChildHandle): TransportProcess {
  return {
    stdin: new WritableStream<Uint8Array>({
      write: (chunk) => child.write([chunk]),
      close: () => child.closeStdin(),
      abort: () => child.closeStdin(),
    }),
    stdout: child.stdout,
    stderr: child.stderr,
    exited: child.exited.then((status) =>
      exitThroughWrapper(status.code, status.signal)
    ),
    kill: (signal) => child.kill(signal),
    pid: child.pid,
    setRef: (ref) => child.setRef(ref),
  };
}

const EMPTY_STDERR = (): ReadableStream<Uint8Array> =>
  new ReadableStream<Uint8Array>({ start: (controller) => controller.close() });

/**
 * An exit status as a transport reported it, made total: a code that is
 * not an integer or a signal that is not a string counts as neither.
 */
function exitStatusOf(value: unknown): ExitStatus {
  const status = (typeof value === "object" && value !== null ? value : {}) as {
    code?: unknown;
    signal?: unknown;
  };
  const code = Number.isInteger(status.code) ? status.code as number : null;
  const signal = typeof status.signal === "string" && status.signal !== ""
    ? status.signal.slice(0, 32)
    : null;
  return { code: signal === null ? code : null, signal };
}

/**
 * The handle of a transport's process: writes go to its stdin in order,
 * the end of stdin closes it, a kill reaches the transport, and `exited`
 * settles (never rejects) once the transport says so, or
 * {@linkcode KILL_SETTLE_MS} after a `SIGKILL` if it never does.
 *
 * @param process What the transport handed back.
 * @returns The handle.
 */
export function transportChild(process: TransportProcess): ChildHandle {
  const writer = process.stdin.getWriter();
  // A write after the far side went away rejects; the caller learns of
  // the end through `exited`.
  writer.closed.catch(() => {});
  let stdinOpen = true;
  let settle!: (status: ExitStatus) => void;
  const exited = new Promise<ExitStatus>((resolve) => {
    settle = resolve;
  });
  let killTimer: ReturnType<typeof setTimeout> | undefined;
  Promise.resolve(process.exited).then(
    (status) => settle(exitStatusOf(status)),
    () => settle({ code: null, signal: null }),
  ).finally(() => {
    if (killTimer !== undefined) clearTimeout(killTimer);
    if (!stdinOpen) return;
    stdinOpen = false;
    writer.abort(new Error("Cannot write to worker: it has exited"))
      .catch(() => {});
  });
  return {
    pid: Number.isInteger(process.pid) ? process.pid as number : 0,
    stdout: process.stdout,
    stderr: process.stderr ?? EMPTY_STDERR(),
    exited,
    write: serialWriter((chunk) => writer.write(chunk)),
    closeStdin() {
      if (!stdinOpen) return;
      stdinOpen = false;
      writer.close().catch(() => {});
    },
    kill(signal) {
      try {
        process.kill(signal);
      } catch {
        // The transport's own trouble: the settle timer below still holds.
      }
      if (signal === "SIGKILL" && killTimer === undefined) {
        // Kept referenced: whoever ends the worker waits for it (5 s at most).
        killTimer = setTimeout(
          () => settle({ code: null, signal: "SIGKILL" }),
          KILL_SETTLE_MS,
        );
      }
    },
    setRef(ref) {
      try {
        process.setRef?.(ref);
      } catch {
        // Not the worker's business.
      }
    },
  };
}

/** Whether a value has a method of that name. */
function hasMethod(value: unknown, name: string): boolean {
  return typeof value === "object" && value !== null &&
    typeof (value as Record<string, unknown>)[name] === "function";
}

/**
 * What is wrong with what a transport handed back, or `undefined` when it
 * has the shape of a {@linkcode TransportProcess}.
 */
function processProblem(value: unknown): string | undefined {
  if (typeof value !== "object" || value === null) {
    return `it handed back ${
      value === null ? "null" : typeof value
    }, not a process`;
  }
  const process = value as Record<string, unknown>;
  if (!hasMethod(process.stdin, "getWriter")) {
    return "its stdin is not a WritableStream";
  }
  if (!hasMethod(process.stdout, "getReader")) {
    return "its stdout is not a ReadableStream";
  }
  if (process.stderr !== undefined && !hasMethod(process.stderr, "getReader")) {
    return "its stderr is not a ReadableStream";
  }
  if (!hasMethod(process.exited, "then")) return "its exited is not a promise";
  if (typeof process.kill !== "function") return "it has no kill()";
  return undefined;
}

/** How a start through a transport ended. */
export type TransportOpening =
  /** The worker's handle. */
  | { child: ChildHandle }
  /** The deadline passed first. */
  | { timedOut: true }
  /**
   * It failed: `retry` when another attempt may fare better (the
   * transport's own failure, not a local program that is missing).
   */
  | { error: WorkerStartError; retry: boolean };

/**
 * Starts a worker through a transport, within a deadline: the one way a
 * worker that runs elsewhere is started (an argv prefix is the transport
 * {@linkcode commandTransport} makes). When the deadline passes first the
 * request's signal is aborted, and a process handed back later is killed.
 * A throw, a rejection or something that is not a process handed back is a
 * `WorkerStartError` (`failure: "spawn"`) naming the transport.
 *
 * @param transport The transport.
 * @param request What to run (its `signal` is added here).
 * @param timeoutMs How long the start may take (0: no bound).
 * @returns How it ended; never rejects.
 */
export async function openTransport(
  transport: WorkerTransport,
  request: Omit<TransportRequest, "signal">,
  timeoutMs: number,
): Promise<TransportOpening> {
  const abort = new AbortController();
  const failed = (error: unknown): TransportOpening => {
    // A command transport's own error: its local program cannot start,
    // and would not the next time either.
    if (error instanceof WorkerStartError) return { error, retry: false };
    const detail = error instanceof Error ? error.message : String(error);
    return {
      error: new WorkerStartError({
        module: request.module,
        failure: "spawn",
        detail: `cannot start it through launcher ${
          JSON.stringify(transport.name)
        }: ${detail}`,
        cause: error,
      }),
      retry: true,
    };
  };
  let started: Promise<TransportProcess>;
  try {
    started = Promise.resolve(
      transport.start({ ...request, signal: abort.signal }),
    );
  } catch (error: unknown) {
    return failed(error);
  }
  let timer: ReturnType<typeof setTimeout> | undefined;
  const outcome = await Promise.race([
    started.then(
      (process) => ({ process }),
      (error: unknown) => ({ error }),
    ),
    ...(timeoutMs > 0
      ? [
        new Promise<"timeout">((resolve) => {
          timer = setTimeout(() => resolve("timeout"), timeoutMs);
        }),
      ]
      : []),
  ]);
  clearTimeout(timer);
  if (outcome === "timeout") {
    abort.abort(new Error("the start passed startTimeoutMs"));
    // One handed back too late is ended: nothing would ever talk to it.
    started.then((late) => {
      try {
        late.kill("SIGKILL");
      } catch {
        // The transport's own trouble.
      }
    }, () => {});
    return { timedOut: true };
  }
  if ("error" in outcome) return failed(outcome.error);
  const problem = processProblem(outcome.process);
  if (problem !== undefined) {
    try {
      (outcome.process as Partial<TransportProcess>).kill?.("SIGKILL");
    } catch {
      // Not a process anyway.
    }
    return failed(new Error(problem));
  }
  return { child: transportChild(outcome.process) };
}
