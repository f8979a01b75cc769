/**
 * The pid namespace the bubblewrap-sandboxed workers of one parent share,
 * so that they see distinct pids: LMDB takes its reader lock as an fcntl
 * lock at byte offset = the reader's pid in the environment's lock file
 * (`mdb_reader_pid` in lmdb's mdb.c), and any client that keys shared state
 * by pid does the same kind of thing. Workers in pid namespaces of their
 * own are all pid 2, and two of them cannot both read the same LMDB
 * environment.
 *
 * A small holder process owns the namespace: bubblewrap with a new user
 * namespace and a new pid namespace, whose init reaps orphans, running a
 * shell that sets the user namespace's `max_user_namespaces` to 0 (no
 * process that joins it can make a user namespace of its own, as
 * bubblewrap's `--disable-userns` gives a worker in a user namespace of its
 * own), says `ready` and waits for its stdin to close. Each worker's
 * bubblewrap joins its user and pid namespaces (`--userns`, `--pidns`, the
 * descriptors opened by a shell that then execs bubblewrap) and makes every
 * other namespace of its own, as before. The holder starts while the first
 * worker that needs it is being built ({@linkcode startPidNamespaceAhead})
 * and ends a second after the last one has exited
 * (its stdin closed; with the parent, through `setpriv --pdeathsig` and
 * bubblewrap's `--die-with-parent`).
 *
 * Sharing a pid namespace lets workers see each other's pids; the plan
 * (`plan.ts`) shares it only where each worker is also its own Landlock
 * domain with signal scoping (ABI 6): a worker cannot signal, trace (Landlock
 * and the seccomp filter) or read `/proc` of a sibling or of the holder
 * (Landlock allows only its own `/proc/<pid>`), and only when no grant of
 * the worker reaches into `/proc`.
 *
 * @module
 */

import { WorkerStartError } from "../../errors.ts";
import type { ChildHandle, RuntimeAdapter, SpawnRequest } from "../types.ts";
import type { LaunchStep, WrappedStep, Wrapper } from "../launch/types.ts";
import { LIBRARY_PATHS } from "./bwrap.ts";

/** The programs that make and join the shared namespace (real paths). */
export interface PidNamespaceTools {
  /** The bubblewrap binary. */
  bwrap: string;
  /** A POSIX shell (`/bin/sh`). */
  shell: string;
  /** `setpriv`, for the holder's parent-death signal, when there is one. */
  setpriv: string | undefined;
}

/**
 * The argument a worker's command holds in place of the holder's pid until
 * the start binds it ({@linkcode bindPidNamespace}).
 */
export const HOLDER_PID_SLOT = "{airlock:pid-namespace-holder}";

/** The descriptor bubblewrap joins the holder's user namespace from. */
export const USER_NAMESPACE_FD = "4";
/** The descriptor bubblewrap joins the holder's pid namespace from. */
export const PID_NAMESPACE_FD = "5";

/** How long the holder outlives the last worker in its namespace, in ms. */
export const HOLDER_LINGER_MS = 1_000;

/** How long the holder may take to say it is ready, in ms. */
export const HOLDER_READY_TIMEOUT_MS = 10_000;

/** What the holder's shell runs. */
const HOLDER_SCRIPT =
  "echo 0 > /proc/sys/user/max_user_namespaces && echo ready && read -r _";

/**
 * The holder's command line: bubblewrap with new user, pid, network, IPC,
 * UTS and cgroup namespaces, no capability but `CAP_SYS_RESOURCE` (to set
 * the user namespace's limit), the library directories and the shell
 * read-only, running the shell.
 *
 * @param tools The programs.
 * @returns The argv.
 *
 * @example
 * ```ts
 * import { holderArgv } from "./pid_namespace.ts";
 * import assert from "node:assert/strict";
 *
 * const argv = holderArgv({ bwrap: "/usr/bin/bwrap", shell: "/bin/sh", setpriv: undefined });
 * assert.equal(argv[0], "/usr/bin/bwrap");
 * assert.ok(argv.includes("--unshare-pid"));
 * ```
 */
export function holderArgv(tools: PidNamespaceTools): string[] {
  const argv = [
    tools.bwrap,
    "--die-with-parent",
    "--new-session",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--cap-drop",
    "ALL",
    "--cap-add",
    "CAP_SYS_RESOURCE",
  ];
  for (const path of LIBRARY_PATHS) argv.push("--ro-bind-try", path, path);
  argv.push(
    "--ro-bind",
    tools.shell,
    tools.shell,
    "--proc",
    "/proc",
    "--remount-ro",
    "/",
    "--chdir",
    "/",
    "--",
    tools.shell,
    "-c",
    HOLDER_SCRIPT,
  );
  return tools.setpriv === undefined
    ? argv
    : [tools.setpriv, "--pdeathsig", "KILL", "--", ...argv];
}

/**
 * The shell a worker's bubblewrap runs under to join the holder's
 * namespaces: it finds the holder's init (the first child of the holder's
 * bubblewrap), opens its `/proc/<init>/ns/user` and `.../ns/pid` as
 * descriptors {@linkcode USER_NAMESPACE_FD} and {@linkcode PID_NAMESPACE_FD}
 * and execs bubblewrap (no process between). The holder's pid is
 * {@linkcode HOLDER_PID_SLOT} until bound.
 *
 * @param shell The shell.
 * @returns The argv prefix, to put before bubblewrap's.
 *
 * @example
 * ```ts
 * import { HOLDER_PID_SLOT, joinShell } from "./pid_namespace.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(joinShell("/bin/sh").slice(-1), [HOLDER_PID_SLOT]);
 * ```
 */
export function joinShell(shell: string): string[] {
  return [
    shell,
    "-c",
    // The children file has no final newline: read fails, but sets init.
    `read -r init _ < "/proc/$0/task/$0/children"; [ -n "$init" ] || { echo "airlock: the pid namespace holder (pid $0) is gone" >&2; exit 125; }; exec "$@" ${USER_NAMESPACE_FD}<"/proc/$init/ns/user" ${PID_NAMESPACE_FD}<"/proc/$init/ns/pid"`,
    HOLDER_PID_SLOT,
  ];
}

/**
 * The wrapper that joins the shared namespaces: {@linkcode joinShell}
 * around bubblewrap (and around the step that opens bind descriptors for
 * it, so that 4 and 5 are taken first), and the programs the start needs
 * to acquire the namespace (`WrappedStep.pidNamespace`).
 *
 * @param tools bubblewrap and the shell.
 * @returns The wrapper.
 */
export function pidNamespaceWrapper(
  tools: { bwrap: string; shell: string },
): Wrapper {
  return {
    name: "pidns",
    pidNamespace: tools,
    wrap(inner: LaunchStep): WrappedStep {
      return {
        argv: [...joinShell(tools.shell), ...inner.argv],
        env: inner.env,
        readOnly: [tools.shell, ...inner.readOnly],
        pidNamespace: { bwrap: tools.bwrap, shell: tools.shell },
      };
    },
  };
}

/**
 * The argv with the holder's pid in its slot.
 *
 * @param argv A worker's argv holding {@linkcode HOLDER_PID_SLOT} once.
 * @param holderPid The host pid of the holder (its bubblewrap).
 * @returns The bound argv.
 * @throws {RangeError} when the argv does not hold the slot exactly once.
 *
 * @example
 * ```ts
 * import { bindPidNamespace, HOLDER_PID_SLOT } from "./pid_namespace.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(bindPidNamespace(["sh", HOLDER_PID_SLOT, "bwrap"], 42), ["sh", "42", "bwrap"]);
 * ```
 */
export function bindPidNamespace(
  argv: readonly string[],
  holderPid: number,
): string[] {
  const slots = argv.filter((arg) => arg === HOLDER_PID_SLOT).length;
  if (slots !== 1 || !Number.isInteger(holderPid) || holderPid <= 1) {
    throw new RangeError(
      `Cannot bind the pid namespace holder ${holderPid}: the command holds its slot ${slots} times`,
    );
  }
  return argv.map((arg) => arg === HOLDER_PID_SLOT ? String(holderPid) : arg);
}

/** A worker's use of the shared namespace: release it once the worker has exited. */
export interface PidNamespaceLease {
  /**
   * The host pid of the holder: bubblewrap outside the namespace, whose
   * first child is the namespace's init (the joining shell looks it up:
   * the parent may not be allowed to read `/proc`).
   */
  readonly holderPid: number;
  /** Ends the use (idempotent); the holder ends after the last one. */
  release(): void;
}

interface Holder {
  child: ChildHandle;
  /** Resolves with the holder's host pid once it is ready. */
  ready: Promise<number>;
  refs: number;
  linger: ReturnType<typeof setTimeout> | undefined;
  gone: boolean;
}

let current: Holder | undefined;

/** The holders' processes that have not exited yet (the test kit's leak checks). */
const live = new Set<number>();

/**
 * The host pids of the holder processes this process started that have not
 * exited yet (one at most, and one ending): for leak checks, which must
 * tell the holder from a worker.
 *
 * @returns The pids.
 */
export function pidNamespaceHolders(): number[] {
  return [...live];
}

/**
 * Joins the shared pid namespace, starting its holder when there is none:
 * resolves once the holder is ready.
 *
 * @param adapter The parent's runtime.
 * @param tools The programs.
 * @param module The worker's display name, for the error.
 * @returns The lease.
 * @throws {WorkerStartError} when the holder cannot start (`failure: "spawn"`).
 */
export async function acquirePidNamespace(
  adapter: RuntimeAdapter,
  tools: PidNamespaceTools,
  module: string,
): Promise<PidNamespaceLease> {
  const taken = await holderFor(adapter, tools, module);
  taken.refs++;
  if (taken.linger !== undefined) {
    clearTimeout(taken.linger);
    taken.linger = undefined;
  }
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    taken.refs--;
    if (taken.refs > 0 || taken.gone) return;
    linger(taken);
  };
  let holderPid: number;
  try {
    holderPid = await taken.ready;
  } catch (error: unknown) {
    release();
    throw error;
  }
  return { holderPid, release };
}

/**
 * Starts the shared namespace's holder ahead of the worker that will join
 * it, when there is none: a worker's start calls it as soon as its build
 * knows the worker joins the namespace, so the holder's own start (a
 * bubblewrap and a shell) runs while the build goes on instead of after
 * it. A holder no worker joins ends {@linkcode HOLDER_LINGER_MS} after it
 * is ready; one that fails is reported by the worker's
 * {@linkcode acquirePidNamespace}, which starts another.
 *
 * @param adapter The parent's runtime.
 * @param tools The programs.
 * @param module The worker's display name, for the error.
 */
export function startPidNamespaceAhead(
  adapter: RuntimeAdapter,
  tools: PidNamespaceTools,
  module: string,
): void {
  holderFor(adapter, tools, module).then(async (holder) => {
    await holder.ready;
    if (holder.refs === 0 && holder.linger === undefined && !holder.gone) {
      linger(holder);
    }
  }).catch(() => {
    // The worker's acquirePidNamespace reports it.
  });
}

/** The current holder, started when there is none (not yet ready). */
async function holderFor(
  adapter: RuntimeAdapter,
  tools: PidNamespaceTools,
  module: string,
): Promise<Holder> {
  const holder = current;
  if (holder !== undefined && !holder.gone) return holder;
  const request = { argv: holderArgv(tools), env: {}, cwd: "/" };
  // What its spawn would load in one block, a turn at a time; another
  // start may have made the holder meanwhile.
  await adapter.prepareSpawn?.(request);
  const made = current;
  if (made !== undefined && !made.gone) return made;
  current = startHolder(adapter, request, module);
  return current;
}

/** Ends the holder {@linkcode HOLDER_LINGER_MS} from now unless a worker joins it. */
function linger(holder: Holder): void {
  holder.linger = setTimeout(() => {
    holder.linger = undefined;
    if (holder.refs === 0) stopHolder(holder);
  }, HOLDER_LINGER_MS);
  unrefTimer(holder.linger);
}

function unrefTimer(timer: ReturnType<typeof setTimeout>): void {
  (timer as { unref?: () => void }).unref?.();
}

function stopHolder(holder: Holder): void {
  if (current === holder) current = undefined;
  holder.gone = true;
  holder.child.closeStdin();
}

function startHolder(
  adapter: RuntimeAdapter,
  request: SpawnRequest,
  module: string,
): Holder {
  const fail = (detail: string, cause?: unknown): WorkerStartError =>
    new WorkerStartError({
      module,
      failure: "spawn",
      detail:
        `the pid namespace its sandbox shares with the other workers could not be made: ${detail}`,
      ...(cause === undefined ? {} : { cause }),
    });
  let child: ChildHandle;
  try {
    child = adapter.spawn(request);
  } catch (error: unknown) {
    const holder: Holder = {
      child: undefined as unknown as ChildHandle,
      ready: Promise.reject(
        fail(error instanceof Error ? error.message : String(error), error),
      ),
      refs: 0,
      linger: undefined,
      gone: true,
    };
    holder.ready.catch(() => {});
    return holder;
  }
  const holder: Holder = {
    child,
    ready: Promise.resolve(0),
    refs: 0,
    linger: undefined,
    gone: false,
  };
  const stderr = collect(child.stderr);
  live.add(child.pid);
  child.exited.then(() => {
    live.delete(child.pid);
    holder.gone = true;
    if (current === holder) current = undefined;
  });
  holder.ready = (async () => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timeout = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), HOLDER_READY_TIMEOUT_MS);
    });
    const said = await Promise.race([
      readLine(child.stdout),
      child.exited.then(() => "exited" as const),
      timeout,
    ]).finally(() => clearTimeout(timer));
    if (said !== "ready") {
      child.kill("SIGKILL");
      await child.exited;
      const tail = (await stderr.text()).trim().slice(-2_000);
      throw fail(
        said === "timeout"
          ? `its holder was not ready within ${HOLDER_READY_TIMEOUT_MS} ms`
          : `its holder (bubblewrap) ended before it was ready${
            tail === "" ? "" : `: ${tail}`
          }`,
      );
    }
    stderr.stop();
    child.setRef(false);
    return child.pid;
  })();
  holder.ready.catch(() => {
    holder.gone = true;
    if (current === holder) current = undefined;
  });
  return holder;
}

/** Reads the first line of a stream, then lets go of it. */
async function readLine(
  stream: ReadableStream<Uint8Array>,
): Promise<string> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  try {
    while (!text.includes("\n") && text.length < 256) {
      const { value, done } = await reader.read();
      if (done) break;
      text += decoder.decode(value, { stream: true });
    }
  } catch {
    // The stream ended with the process.
  } finally {
    reader.releaseLock();
  }
  return text.split("\n")[0] ?? "";
}

/** Collects a stream's text (bounded) until stopped. */
function collect(stream: ReadableStream<Uint8Array>): {
  text(): Promise<string>;
  stop(): void;
} {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  let stopped = false;
  const done = (async () => {
    try {
      while (!stopped) {
        const { value, done } = await reader.read();
        if (done) break;
        text = (text + decoder.decode(value, { stream: true })).slice(-4_096);
      }
    } catch {
      // Released or ended.
    }
  })();
  return {
    text: () => done.then(() => text),
    stop() {
      stopped = true;
      try {
        reader.releaseLock();
      } catch {
        // A read is pending: it settles when the process ends.
      }
    },
  };
}
