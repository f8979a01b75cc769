/**
 * The native network relay (`native/relay.c`, the native confine step's
 * program run with `--relay`): one process per parent, outside every
 * sandbox, which carries the bytes of every forwarded connection of the
 * workers whose native confine step handed it their listening sockets. It
 * runs in a minimal bubblewrap (nothing of the file system but its own
 * directory and `/dev`; the host's network) that makes it from the bytes
 * the parent writes to the spawn's descriptor 3, so no file is written.
 * The parent keeps the policy: for each connection the relay says which
 * worker and listener accepted it, and connects only where the parent's
 * broker then says, to an address, never a name.
 *
 * The lines it speaks are listed in `native/relay.c`. Private to net/.
 *
 * @module
 */

import {
  join,
  mkdtempSync,
  process,
  rmSync,
  tmpdir,
} from "../../node_builtins.ts";
import { nativeConfineElf } from "../native_step.ts";
import { writableByWorker } from "../../launch/executable.ts";
import type { ChildHandle, RuntimeAdapter } from "../../types.ts";
import { addressHex } from "./targets.ts";

/** Where the relay's directory appears in its bubblewrap. */
const RELAY_DIR_INSIDE = "/run/airlock-relay";

/** Where bubblewrap makes the relay's program. */
const RELAY_PROGRAM = "/dev/airlock-relay";

/**
 * How long the relay outlives its last worker (a pool's replacement, the
 * next session, reuse it; after that it ends, as the pid namespace's
 * holder does).
 */
const RELAY_LINGER_MS = 1_000;

/** What a worker's broker hears from the relay. */
export interface RelayWorkerEvents {
  /** The relay listens for the worker's handover at `socket`. */
  listening(): void;
  /** The sandbox handed over exactly its listening sockets. */
  ready(): void;
  /** Listening or the handover failed, or the relay exited. */
  failed(reason: string): void;
  /**
   * Connection `id` was accepted on listener `index` (the layout's order);
   * `closed` settles when the relay closed it.
   */
  accepted(id: number, index: number, closed: Promise<RelayClosed>): void;
  /** A connection on listener `index` was closed at once: too many open. */
  tooMany(index: number): void;
}

/** How a relayed connection ended: bytes each way, and the errno if it failed. */
export interface RelayClosed {
  readonly out: number;
  readonly in: number;
  readonly errno: number;
}

/** One worker's part of the relay. */
export interface RelayWorker {
  /** The unix socket the sandbox binds at `/run/airlock/net.sock`. */
  readonly socket: string;
  /**
   * Connects connection `id` to `address`:`port`: 0 once connected, else
   * the errno. An attempt is abandoned with {@linkcode RelayWorker.abandon}.
   */
  connect(id: number, address: string, port: number): Promise<number>;
  /** Abandons connection `id`'s connect attempt (it took too long): it may be connected elsewhere. */
  abandon(id: number): void;
  /** Closes connection `id` (refused, timed out, or the worker is gone). */
  close(id: number): void;
  /** Closes the worker's listeners and connections. Idempotent. */
  remove(): void;
}

/** The relay as the brokers of this process use it. */
export interface NetRelay {
  /**
   * Registers a worker: the relay listens for its handover.
   *
   * @param listeners The layout's listeners, in order.
   * @param events Where its lines go.
   */
  addWorker(
    listeners: readonly { readonly address: string; readonly port: number }[],
    events: RelayWorkerEvents,
  ): RelayWorker;
}

interface Running {
  child: ChildHandle;
  dir: string;
  gone: boolean;
  workers: Map<number, RelayWorkerEvents>;
  /** The connect attempt in progress, by connection. */
  connecting: Map<
    number,
    { attempt: number; resolve: (errno: number) => void }
  >;
  closing: Map<
    number,
    { settle: (closed: RelayClosed) => void; done: Promise<RelayClosed> }
  >;
  write(line: string): void;
  linger: ReturnType<typeof setTimeout> | undefined;
}

let running: Running | undefined;
let nextWorker = 1;
let nextAttempt = 1;

/**
 * The relay of this process, started on first use (and again after it
 * exited).
 *
 * @param adapter The runtime's spawn.
 * @param bwrap The bubblewrap binary.
 * @returns The relay.
 */
export function netRelay(adapter: RuntimeAdapter, bwrap: string): NetRelay {
  return {
    addWorker(listeners, events) {
      if (running === undefined || running.gone) {
        const elf = nativeConfineElf(process.arch);
        if (elf === undefined) {
          throw new Error(`no native relay for ${process.arch}`);
        }
        running = startRelay(adapter, bwrap, elf);
      }
      return addWorker(running, listeners, events);
    },
  };
}

function addWorker(
  relay: Running,
  listeners: readonly { readonly address: string; readonly port: number }[],
  events: RelayWorkerEvents,
): RelayWorker {
  const id = nextWorker++;
  const items = listeners.map((listener) => {
    const hex = addressHex(listener.address);
    if (hex === undefined) {
      throw new RangeError(`not an address: ${listener.address}`);
    }
    return `${hex},${listener.port}`;
  });
  clearTimeout(relay.linger);
  relay.linger = undefined;
  relay.workers.set(id, events);
  // Referenced while it serves a worker: Bun reads an unreferenced
  // child's pipes only once it is referenced again. (The JavaScript
  // path's listening socket holds the loop alike.)
  relay.child.setRef(true);
  relay.write(`w ${id} ${items.length} ${items.join(" ")}`);
  let removed = false;
  return {
    socket: join(relay.dir, `${id}.sock`),
    connect(connection, address, port) {
      const hex = addressHex(address);
      if (relay.gone || hex === undefined) return Promise.resolve(22);
      const attempt = nextAttempt++;
      return new Promise<number>((resolve) => {
        relay.connecting.set(connection, { attempt, resolve });
        relay.write(`c ${connection} ${attempt} ${hex},${port}`);
      });
    },
    abandon(connection) {
      const pending = relay.connecting.get(connection);
      relay.connecting.delete(connection);
      pending?.resolve(110);
      if (!relay.gone) relay.write(`a ${connection}`);
    },
    close(connection) {
      if (!relay.gone) relay.write(`k ${connection}`);
    },
    remove() {
      if (removed) return;
      removed = true;
      relay.workers.delete(id);
      if (relay.gone) return;
      relay.write(`r ${id}`);
      if (relay.workers.size === 0) lingerThenStop(relay);
    },
  };
}

/** Ends the relay once it has had no worker for {@linkcode RELAY_LINGER_MS}. */
function lingerThenStop(relay: Running): void {
  relay.child.setRef(false);
  clearTimeout(relay.linger);
  relay.linger = setTimeout(() => {
    if (relay.workers.size > 0 || relay.gone) return;
    // Gone for every later worker now; it exits at end of input.
    relayGone(relay);
    relay.child.closeStdin();
  }, RELAY_LINGER_MS);
  (relay.linger as { unref?: () => void }).unref?.();
}

function closing(
  relay: Running,
  connection: number,
): { settle: (closed: RelayClosed) => void; done: Promise<RelayClosed> } {
  let entry = relay.closing.get(connection);
  if (entry === undefined) {
    let settle!: (closed: RelayClosed) => void;
    const done = new Promise<RelayClosed>((resolve) => (settle = resolve));
    entry = { settle, done };
    relay.closing.set(connection, entry);
  }
  return entry;
}

function startRelay(
  adapter: RuntimeAdapter,
  bwrap: string,
  elf: Uint8Array,
): Running {
  const dir = mkdtempSync(join(tmpdir(), "airlock-relay-"));
  const grant = writableByWorker(dir);
  if (grant !== undefined) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `the network relay's directory "${dir}" lies inside "${grant}", where a worker may write and could replace its sockets; set TMPDIR to a directory no worker is granted`,
    );
  }
  const child = adapter.spawn({
    argv: [
      bwrap,
      "--unshare-all",
      "--share-net",
      "--die-with-parent",
      "--new-session",
      "--cap-drop",
      "ALL",
      "--dev",
      "/dev",
      "--perms",
      "0555",
      "--ro-bind-data",
      "3",
      RELAY_PROGRAM,
      "--bind",
      dir,
      RELAY_DIR_INSIDE,
      "--chdir",
      RELAY_DIR_INSIDE,
      RELAY_PROGRAM,
      "--relay",
    ],
    env: {},
    cwd: "/",
    extraInput: elf,
  });
  child.setRef(false);
  const encoder = new TextEncoder();
  const relay: Running = {
    child,
    dir,
    gone: false,
    workers: new Map(),
    connecting: new Map(),
    closing: new Map(),
    write(line) {
      child.write([encoder.encode(`${line}\n`)]).catch(() => {});
    },
    linger: undefined,
  };
  // At this process's exit: the relay ends at end of input (and with its
  // parent), its directory goes now.
  adapter.onExit(() => {
    child.closeStdin();
    rmSync(dir, { recursive: true, force: true });
  });
  void readLines(child.stdout, (line) => onLine(relay, line)).finally(() => {
    relayGone(relay);
  });
  void drain(child.stderr);
  void child.exited.then(() => relayGone(relay));
  return relay;
}

/** The relay exited: every worker and connection of it is told. */
function relayGone(relay: Running): void {
  if (relay.gone) return;
  relay.gone = true;
  if (running === relay) running = undefined;
  for (const events of relay.workers.values()) {
    events.failed("the network relay exited");
  }
  relay.workers.clear();
  for (const pending of relay.connecting.values()) pending.resolve(32);
  relay.connecting.clear();
  for (const entry of relay.closing.values()) {
    entry.settle({ out: 0, in: 0, errno: 32 });
  }
  relay.closing.clear();
  try {
    rmSync(relay.dir, { recursive: true, force: true });
  } catch {
    // Left for the temporary directory's cleaner.
  }
}

function onLine(relay: Running, line: string): void {
  const [verb = "", first = "", ...rest] = line.split(" ");
  const a = Number(first);
  const worker = (): RelayWorkerEvents | undefined => relay.workers.get(a);
  switch (verb) {
    case "L":
      worker()?.listening();
      return;
    case "R":
      worker()?.ready();
      return;
    case "E":
      worker()?.failed(rest.join(" "));
      relay.workers.delete(a);
      if (relay.workers.size === 0) lingerThenStop(relay);
      return;
    case "A": {
      const id = Number(rest[0]);
      const events = worker();
      if (events === undefined) relay.write(`k ${id}`);
      else events.accepted(id, Number(rest[1]), closing(relay, id).done);
      return;
    }
    case "X":
      worker()?.tooMany(Number(rest[0]));
      return;
    case "C":
    case "F": {
      // Only the attempt asked for: an abandoned one may answer late.
      const pending = relay.connecting.get(a);
      if (pending === undefined || pending.attempt !== Number(rest[0])) return;
      relay.connecting.delete(a);
      pending.resolve(verb === "C" ? 0 : Number(rest[1]) || 5);
      return;
    }
    case "D": {
      const pending = relay.connecting.get(a);
      relay.connecting.delete(a);
      pending?.resolve(Number(rest[2]) || 104);
      const entry = relay.closing.get(a);
      relay.closing.delete(a);
      entry?.settle({
        out: Number(rest[0]),
        in: Number(rest[1]),
        errno: Number(rest[2]),
      });
      return;
    }
  }
}

async function readLines(
  stream: ReadableStream<Uint8Array>,
  onLine: (line: string) => void,
): Promise<void> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let text = "";
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) return;
      text += decoder.decode(value, { stream: true });
      let newline = text.indexOf("\n");
      while (newline >= 0) {
        onLine(text.slice(0, newline));
        text = text.slice(newline + 1);
        newline = text.indexOf("\n");
      }
    }
  } catch {
    // Ended with the process.
  }
}

async function drain(stream: ReadableStream<Uint8Array>): Promise<void> {
  try {
    for await (const _ of stream) {
      // Nothing the relay says on stderr is read (it says nothing).
    }
  } catch {
    // Ended.
  }
}
