/**
 * Starting a worker, loaded on the first start (see _launch.ts, which
 * exports it as `launchWorker`): the command, the code cache's warm-up, the
 * spawn, the ready handshake, `setup` replay, and respawns after a crash
 * during start. It imports the launch code (src/runtime/launch/, the OS
 * sandbox in src/runtime/sandbox/, the code cache, the Bun entry) and the
 * connection, so none of them loads when airlock is imported
 * (tests/runtime/import_graph_test.ts). Private to src/parent.
 *
 * @module
 */

import { WorkerStartError, WorkerTimeoutError } from "../errors.ts";
import type { ChildHandle, RuntimeAdapter } from "../runtime/types.ts";
import { openTransport } from "../runtime/launch/transport.ts";
import {
  buildWorkerCommandYielding,
  type StartAhead,
} from "../runtime/launch/command.ts";
import { wrapperFailure } from "../runtime/launch/exit.ts";
import { warmUpCodeCache } from "../runtime/launch/warm_up.ts";
import {
  forgetMachineFacts,
  prefetchHostFacts,
} from "../runtime/sandbox/facts.ts";
import { loadStartBuiltins } from "../runtime/node_builtins.ts";
import { nextTurn } from "../runtime/turns.ts";
import type { WorkerCommand } from "../runtime/launch/types.ts";
import type { NetBroker } from "../runtime/sandbox/net/broker.ts";
import {
  acquirePidNamespace,
  bindPidNamespace,
  type PidNamespaceLease,
  startPidNamespaceAhead,
} from "../runtime/sandbox/pid_namespace.ts";
import type { CallRecord } from "./_call.ts";
import {
  type Connection,
  type ConnectionEvents,
  startConnection,
} from "./connection.ts";
import { crashError } from "./_exit.ts";
import { startFault } from "./_faults.ts";
import type { ResolvedWorkerOptions } from "./options.ts";
import { publishExit, publishStart, type WorkerMode } from "./_events.ts";
import { asStartError, outOfDescriptors, runSetup } from "./_launch.ts";

/** Backoff before respawn number n (1-based), in ms. */
function backoffMs(attempt: number): number {
  return Math.min(1_000, 50 * 4 ** (attempt - 1));
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Events routed to whoever owns the connection now. */
export interface RoutedEvents extends ConnectionEvents {
  /** Replaces the target of the events. */
  route(target: ConnectionEvents): void;
}

/**
 * Events that go to a target that can be swapped once the start is done.
 *
 * @param initial Where events go first.
 * @returns The routed events.
 */
export function routedEvents(initial: ConnectionEvents): RoutedEvents {
  let target = initial;
  return {
    onLost: (calls, exit, unstarted) => target.onLost(calls, exit, unstarted),
    onTimeout: (call) => target.onTimeout(call),
    onSlotFree: () => target.onSlotFree?.(),
    onStarted: (call) => target.onStarted?.(call),
    onLiveness: (alive) => target.onLiveness?.(alive),
    route(next) {
      target = next;
    },
  };
}

/** Events during start: setup calls lost in a crash fail with the crash. */
function startEvents(module: string): ConnectionEvents {
  return {
    onLost(calls: CallRecord[], exit) {
      for (const call of calls) call.reject(crashError(module, call, exit));
    },
    onTimeout() {},
  };
}

/**
 * What a program prints when the script or module it was told to run does
 * not exist (Python, Deno and Bun, Node, the shells): a `command` whose
 * script is missing exits with a code before it is ready, and would again.
 */
export const MISSING_SCRIPT: RegExp =
  /can't open file|Module not found|Cannot find module|No such file/;

/** Whether a start failed in a wrapper (bubblewrap, the confine step). */
function inSandboxWrapper(error: unknown): boolean {
  return error instanceof WorkerStartError && error.failure === "exited" &&
    wrapperFailure(error.stderrTail ?? "") !== undefined;
}

/**
 * Failures a respawn would repeat (and a start that used up its whole
 * deadline: retrying would multiply the wait the caller asked for). A
 * spawn that ran out of descriptors (EMFILE, ENFILE) is not one: others
 * may be freed meanwhile.
 */
function isFinal(error: unknown): boolean {
  if (error instanceof WorkerTimeoutError) return true;
  if (!(error instanceof WorkerStartError)) return false;
  switch (error.failure) {
    case "import":
    case "definition":
    case "setup":
      return true;
    case "spawn":
      return !outOfDescriptors(error);
    case "exited": {
      const tail = error.stderrTail ?? "";
      // A wrapper (bubblewrap, setpriv, the Landlock step) that could not
      // start the worker fails the same way again: spawn-class. So does a
      // program that exited (not killed) saying its script is missing.
      return wrapperFailure(tail) !== undefined ||
        (error.signal === null && error.exitCode !== null &&
          MISSING_SCRIPT.test(tail));
    }
    default:
      return false;
  }
}

/**
 * Publishes a ready worker's start and, later, its exit (each only if
 * someone listens then).
 *
 * @param conn The ready worker.
 * @param module The worker module.
 * @param mode The kind of handle it serves.
 */
function published(conn: Connection, module: string, mode: WorkerMode): void {
  publishStart(() => ({
    pid: conn.pid,
    module,
    mode,
    startedAt: conn.startedAt,
    startMs: Date.now() - conn.startedAt,
    runtime: conn.hello?.runtime ?? "",
    sandboxes: conn.sandboxes,
  }));
  conn.closed.then((exit) =>
    publishExit(() => ({
      pid: exit.pid,
      module,
      mode,
      exitCode: exit.code,
      signal: exit.signal,
      requested: exit.requested,
      reason: exit.reason,
      uptimeMs: Date.now() - conn.startedAt,
    }))
  );
}

/**
 * Waits, within what is left of the start's deadline, for the forwarder of
 * a worker's `host:port` grants to listen, so that no call (`setup`
 * included) connects before it does.
 *
 * @throws {WorkerStartError} when it failed or went away first.
 * @throws {WorkerTimeoutError} when the deadline passed first.
 */
async function forwarderReady(
  network: NetBroker,
  conn: Connection,
  options: ResolvedWorkerOptions,
  since: number,
): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const left = Math.max(0, options.startTimeoutMs - (Date.now() - since));
  try {
    const outcome = await Promise.race([
      network.ready.then(() => "ready" as const),
      conn.closed.then(() => "exited" as const),
      new Promise<"timeout">((resolve) => {
        timer = setTimeout(() => resolve("timeout"), left);
      }),
    ]);
    if (outcome === "timeout") {
      throw new WorkerTimeoutError({
        module: options.label,
        pid: conn.pid,
        timeoutMs: options.startTimeoutMs,
        elapsedMs: Date.now() - since,
        phase: "start",
      });
    }
    if (outcome === "exited") {
      throw new WorkerStartError({
        module: options.label,
        failure: "exited",
        detail: "it exited before its network forwarder was ready",
      });
    }
  } catch (error: unknown) {
    if (error instanceof WorkerTimeoutError) throw error;
    if (error instanceof WorkerStartError) throw error;
    throw new WorkerStartError({
      module: options.label,
      failure: "spawn",
      detail: error instanceof Error ? error.message : String(error),
      cause: error,
    });
  } finally {
    clearTimeout(timer);
  }
}

/**
 * The pid namespace the worker's command joins, acquired (its holder
 * started when there is none), or `undefined` when it joins none.
 */
function joinedPidNamespace(
  command: WorkerCommand,
  adapter: RuntimeAdapter,
): Promise<PidNamespaceLease | undefined> {
  if (command.pidNamespace === undefined) return Promise.resolve(undefined);
  return acquirePidNamespace(adapter, command.pidNamespace, command.module);
}

/**
 * A start's command, built in slices, with the pid namespace's holder begun
 * as soon as the build knows the worker joins it.
 */
function buildForStart(
  options: ResolvedWorkerOptions,
  adapter: RuntimeAdapter,
): Promise<WorkerCommand> {
  const ahead: StartAhead = (tools) =>
    startPidNamespaceAhead(adapter, tools, options.label);
  return buildWorkerCommandYielding(options, adapter, "read-only", ahead);
}

/**
 * The first start's command: the built-ins the start uses, the host facts,
 * the build, and the code cache's warm-up (a start that could not warm up
 * within `startTimeoutMs` fails: the worker would not be ready either).
 *
 * @throws {WorkerTimeoutError} when the warm-up did not finish in time.
 */
async function firstCommand(
  options: ResolvedWorkerOptions,
  adapter: RuntimeAdapter,
  since: number,
  signal: AbortSignal | undefined,
): Promise<WorkerCommand> {
  // The start never holds the event loop long, the first of the process
  // included: the built-ins it uses load one per turn, the sandbox's probes
  // (processes) run asynchronously, and the build reads their cached
  // answers in slices.
  await loadStartBuiltins();
  await prefetchHostFacts(options, adapter);
  const first = await buildForStart(options, adapter);
  await nextTurn();
  const warmed = await warmUpCodeCache(
    options,
    adapter,
    first,
    options.startTimeoutMs,
    signal,
  ).catch((error: unknown) => {
    first.limits?.release();
    first.network?.close();
    throw error;
  });
  if (!warmed) {
    first.limits?.release();
    first.network?.close();
    // A module that hangs at import (or a machine too loaded): the worker
    // would not be ready either.
    throw new WorkerTimeoutError({
      module: options.label,
      pid: undefined,
      timeoutMs: options.startTimeoutMs,
      elapsedMs: Date.now() - since,
      phase: "start",
    });
  }
  return first;
}

/** A command ready to spawn (or a worker its transport started). */
interface Launched {
  /** The command, bound to its pid namespace. */
  command: WorkerCommand;
  /** The pid namespace it joins, held until it exits. */
  lease: PidNamespaceLease | undefined;
  /** The worker its launcher's transport started, if any. */
  child: ChildHandle | undefined;
  /** When the transport was asked. */
  began: number;
}

/**
 * One attempt's launch up to the spawn: the pid namespace, a launcher's
 * transport, the network broker's socket.
 *
 * @returns What to start, or `{ retry }` with the error of a failure a
 *   next attempt may not repeat.
 * @throws {WorkerTimeoutError} when a transport did not start in time.
 * @throws {WorkerStartError} when a transport failed for good, or the
 *   network broker cannot listen.
 */
async function launchOnce(
  built: WorkerCommand,
  options: ResolvedWorkerOptions,
  adapter: RuntimeAdapter,
): Promise<Launched | { retry: unknown }> {
  // What the spawn would load in one block, a turn at a time, while the
  // pid namespace's holder gets ready.
  const [joined] = await Promise.allSettled([
    joinedPidNamespace(built, adapter),
    adapter.prepareSpawn?.(built.spawn),
  ]);
  if (joined.status === "rejected") {
    built.limits?.release();
    built.network?.close();
    return { retry: joined.reason };
  }
  const lease = joined.value;
  const command = lease === undefined ? built : {
    ...built,
    spawn: {
      ...built.spawn,
      argv: bindPidNamespace(built.spawn.argv, lease.holderPid),
    },
  };
  const began = Date.now();
  let child: ChildHandle | undefined;
  if (command.transport !== undefined) {
    // A launcher: its transport starts the worker elsewhere.
    const opened = await openTransport(
      command.transport,
      { ...command.spawn, module: command.module },
      options.startTimeoutMs,
    );
    if (!("child" in opened)) {
      command.limits?.release();
      command.network?.close();
      lease?.release();
      if ("timedOut" in opened) {
        throw new WorkerTimeoutError({
          module: options.label,
          pid: undefined,
          timeoutMs: options.startTimeoutMs,
          elapsedMs: Date.now() - began,
          phase: "start",
        });
      }
      if (!opened.retry) throw opened.error;
      return { retry: opened.error };
    }
    child = opened.child;
  }
  const network = command.network;
  if (network !== undefined) {
    try {
      await network.listening;
    } catch (error: unknown) {
      network.close();
      lease?.release();
      throw new WorkerStartError({
        module: options.label,
        failure: "spawn",
        detail: `cannot listen on the network broker's socket: ${
          error instanceof Error ? error.message : String(error)
        }`,
        cause: error,
      });
    }
  }
  return { command, lease, child, began };
}

/**
 * Waits for a started worker to be ready for calls: its hello, its network
 * forwarder, its `setup` calls.
 *
 * @throws {WorkerStartError} when it fails first, or was stopped right
 *   after its hello.
 */
async function whenReady(
  conn: Connection,
  options: ResolvedWorkerOptions,
  network: NetBroker | undefined,
  since: number,
): Promise<void> {
  await conn.ready;
  if (network !== undefined) {
    network.setPid(conn.pid);
    await forwarderReady(network, conn, options, since);
  }
  await runSetup(conn, options, conn.startedAt);
  if (conn.alive) return;
  // It said hello and was stopped before it could take a call (a protocol
  // error right behind the hello, a stdout that cannot be read): a failed
  // start, retried up to maxRetries. Handed over, it would be restarted for
  // the queued calls, which it never takes, again and again, and they would
  // never settle.
  const exit = await conn.closed;
  throw new WorkerStartError({
    module: options.label,
    failure: "handshake",
    pid: conn.pid,
    exitCode: exit.code,
    signal: exit.signal,
    detail: `it was stopped right after its hello, before it took a call${
      exit.reason === undefined ? "" : ` (${exit.reason})`
    }`,
    stderrTail: exit.stderrTail,
    ...(exit.protocolError === undefined ? {} : { cause: exit.protocolError }),
  });
}

/** What a start that failed every attempt throws. */
function afterLastAttempt(
  options: ResolvedWorkerOptions,
  attempts: number,
  lastError: unknown,
): unknown {
  if (attempts === 1) return lastError;
  const last = lastError instanceof Error
    ? lastError.message
    : String(lastError);
  return new WorkerStartError({
    module: options.label,
    failure: "retries",
    detail:
      `it failed to start ${attempts} times in a row (maxRetries ${options.maxRetries}); last failure: ${last}`,
    cause: lastError,
  });
}

/**
 * The start behind `launchWorker` (_launch.ts, which documents it).
 *
 * @param options The resolved options.
 * @param adapter The parent's runtime.
 * @param events Where the connection's events go once started.
 * @param mode The kind of handle it serves, for the start and exit events.
 * @param signal The caller's abort: stops the wait for the warm-up.
 * @returns The ready connection.
 */
export async function startWorker(
  options: ResolvedWorkerOptions,
  adapter: RuntimeAdapter,
  events: ConnectionEvents,
  mode: WorkerMode,
  signal?: AbortSignal,
): Promise<Connection> {
  let lastError: unknown;
  const attempts = options.maxRetries + 1;
  const since = Date.now();
  let first: WorkerCommand | undefined = await firstCommand(
    options,
    adapter,
    since,
    signal,
  );
  for (let attempt = 1; attempt <= attempts; attempt++) {
    if (attempt > 1) await delay(backoffMs(attempt - 1));
    const routed = routedEvents(startEvents(options.label));
    const built = first ?? await buildForStart(options, adapter);
    first = undefined;
    const launched = await launchOnce(built, options, adapter);
    if ("retry" in launched) {
      lastError = launched.retry;
      continue;
    }
    const { command, lease, child, began } = launched;
    const network = command.network;
    // The build and the spawn (each some ms on a loaded machine) in turns
    // of their own.
    if (child === undefined) await nextTurn();
    const conn = startConnection({
      adapter,
      command,
      maxFrameBytes: options.maxFrameBytes,
      startTimeoutMs: options.startTimeoutMs,
      cancelGraceMs: options.cancelGraceMs,
      onLog: options.onLog,
      events: routed,
      grants: { permissions: options.permissions, cwd: options.cwd },
      ...(child === undefined ? {} : { child, startBegan: began }),
    });
    if (lease !== undefined) {
      const held = lease;
      conn.closed.then(() => held.release(), () => held.release());
    }
    if (startFault(options, conn)) {
      conn.kill("its start was made to fail by the test kit (failNextStart)");
    }
    if (network !== undefined) {
      conn.closed.then(() => network.close(), () => network.close());
    }
    try {
      await whenReady(conn, options, network, since);
      routed.route(events);
      published(conn, options.label, mode);
      return conn;
    } catch (error: unknown) {
      conn.kill("the start failed", true);
      await conn.closed;
      lastError = asStartError(error, options, conn);
      // A sandbox wrapper refused: a probe answer kept on this machine may
      // be stale (they can only fail starts, never weaken them); the next
      // start probes again.
      if (inSandboxWrapper(lastError)) forgetMachineFacts();
      if (isFinal(lastError)) throw lastError;
    }
  }
  throw afterLastAttempt(options, attempts, lastError);
}
