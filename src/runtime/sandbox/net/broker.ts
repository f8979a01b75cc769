/**
 * The parent's side of a sandboxed worker's network: the broker. It listens
 * on a unix socket in a private directory of this process (mode 0700, one
 * per worker), which the sandbox binds in; each connection first names the
 * granted target it wants (one line, `host:port`), then carries that TCP
 * stream. The broker checks the name against the worker's own list (the
 * forwarder in the sandbox only says which; a forwarder the worker tampered
 * with can only lose connectivity), resolves the host itself, refuses
 * addresses the grant did not name (loopback, link-local, multicast,
 * unspecified and reserved addresses unless the scope is that address, or
 * `localhost` for loopback), connects and relays both ways with
 * backpressure, and publishes every connection, or its refusal and why, on
 * the diagnostics channel {@linkcode NET_CONNECTION_CHANNEL}.
 *
 * See docs/permissions.md ("Network grants by host and port").
 *
 * @module
 */

import type * as Dns from "node:dns";
import {
  diagnosticsChannel,
  join,
  mkdtempSync,
  rmSync,
  tmpdir,
  writeFileSync,
} from "../../node_builtins.ts";
import { writableByWorker } from "../../launch/executable.ts";
import {
  addressClass,
  type NetLayout,
  type NetTarget,
  SANDBOX_NSSWITCH,
} from "./targets.ts";
import { jsPath } from "./_js_path.ts";
import { nativePath } from "./_native_path.ts";
import type { NetRelay } from "./relay.ts";

/** The diagnostics channel of the broker's connections: {@linkcode NetConnectionEvent}. */
export const NET_CONNECTION_CHANNEL = "airlock:net:connection";

/** The most connections one worker may have open through the broker at once. */
export const MAX_NET_CONNECTIONS = 256;

/** How long a connection may take to name its target. */
export const NET_HEADER_TIMEOUT_MS = 10_000;

/** The longest first line a connection may send (its target). */
export const MAX_HEADER_BYTES = 512;

/** How long the broker tries to connect to one address of a target. */
export const NET_CONNECT_TIMEOUT_MS = 10_000;

/**
 * The most name lookups the brokers of this process run at once, for all
 * workers together. `node:dns` `lookup` is libc's getaddrinfo on a thread
 * (libuv's pool of 4 under Node, threads of its own under Deno and Bun): a
 * worker opening its 256 connections to names that resolve slowly would
 * otherwise hold that many threads, and the parent's own file I/O waits
 * behind them under Node's pool. Lookups of one name a worker asks for at
 * the same time are one lookup.
 */
export const MAX_CONCURRENT_LOOKUPS = 4;

/**
 * How long a connection may wait for its name to resolve, queued behind
 * other lookups included; past it the connection is refused (the lookup
 * itself goes on, holding its place, until libc gives up).
 */
export const NET_LOOKUP_TIMEOUT_MS = 10_000;

/** The lookups running now and those waiting for a place, process-wide. */
const lookupSlots: { running: number; waiting: (() => void)[] } = {
  running: 0,
  waiting: [],
};

/** Runs `lookup(host)` once a place among {@linkcode MAX_CONCURRENT_LOOKUPS} is free. */
async function inLookupSlot(
  lookup: NetLookup,
  host: string,
): ReturnType<NetLookup> {
  if (lookupSlots.running >= MAX_CONCURRENT_LOOKUPS) {
    await new Promise<void>((resolve) => lookupSlots.waiting.push(resolve));
  } else {
    lookupSlots.running++;
  }
  try {
    return await lookup(host);
  } finally {
    // The place passes to the next waiter, or is given back.
    const next = lookupSlots.waiting.shift();
    if (next !== undefined) next();
    else lookupSlots.running--;
  }
}

/**
 * The message of {@linkcode NET_CONNECTION_CHANNEL}: one per connection a
 * sandboxed worker opened through its forwarder, published when it ends
 * (or is refused).
 */
export interface NetConnectionEvent {
  /** The worker's pid (the host's), or `undefined` before it is known. */
  readonly pid: number | undefined;
  /** The worker's module. */
  readonly module: string;
  /** The granted scope the connection named (as sent, bounded), e.g. `"db.internal:5432"`. */
  readonly target: string;
  /** The host it names, or `undefined` when the target was not granted. */
  readonly host: string | undefined;
  /** The port, or `undefined` when the target was not granted. */
  readonly port: number | undefined;
  /** The address the broker connected to, or `undefined` when it connected nowhere. */
  readonly address: string | undefined;
  /** Bytes the worker sent to the server. */
  readonly bytesOut: number;
  /** Bytes the server sent to the worker. */
  readonly bytesIn: number;
  /** From the connection's arrival at the broker to its end, in milliseconds. */
  readonly durationMs: number;
  /** Why the broker refused it (nothing was connected), or `undefined`. */
  readonly refused: string | undefined;
  /** Why a connected relay ended with an error, or `undefined`. */
  readonly error: string | undefined;
}

/** Resolves a host name to its addresses (`node:dns` `lookup` with `all`). */
export type NetLookup = (
  host: string,
) => Promise<readonly { address: string; family: number }[]>;

/** Options of {@linkcode startNetBroker}. */
export interface NetBrokerOptions {
  /** The worker's module, for the events. */
  module: string;
  /** The worker's network: its targets and hosts file (from `netLayout()`). */
  layout: NetLayout;
  /**
   * Resolves a name. Tests pass their own.
   *
   * @default {node:dns lookup, every address}
   */
  lookup?: NetLookup;
  /**
   * How long to try each address.
   *
   * @default {NET_CONNECT_TIMEOUT_MS}
   */
  connectTimeoutMs?: number;
  /**
   * The native relay, when the worker's native confine step hands its
   * listening sockets over to it; otherwise the forwarder in the sandbox
   * connects to this broker's own socket and the relay is JavaScript.
   *
   * @default {undefined}
   */
  relay?: NetRelay;
}

/** A running broker: what the sandbox binds in, and its lifecycle. */
export interface NetBroker {
  /** The private directory (mode 0700) holding the files below (and the socket, but for the native relay's). */
  readonly dir: string;
  /** The unix socket the sandbox's forwarder (or native confine step) connects to. */
  readonly socket: string;
  /** The sandbox's `/etc/hosts`. */
  readonly hostsFile: string;
  /** The sandbox's `/etc/nsswitch.conf`. */
  readonly nsswitchFile: string;
  /** Settles once the socket is listening (rejects when it cannot listen). */
  readonly listening: Promise<void>;
  /**
   * Settles when the forwarder said it listens on every address; rejects
   * with its error, or when it went away before that.
   */
  readonly ready: Promise<void>;
  /** Sets the worker's pid for the events once it is known. */
  setPid(pid: number | undefined): void;
  /** Stops listening, ends every relay and removes the directory. Idempotent. */
  close(): void;
}

function defaultLookup(host: string): ReturnType<NetLookup> {
  const dns = (globalThis as unknown as {
    process: { getBuiltinModule(id: string): unknown };
  }).process.getBuiltinModule("node:dns") as typeof Dns;
  return dns.promises.lookup(host, { all: true, verbatim: true });
}

/**
 * What a broker's data path (the JavaScript relay of `_js_path.ts`, or the
 * native relay of `_native_path.ts`) needs of its broker: the policy, the
 * events, the lifecycle. Private to net/.
 */
export interface BrokerCore {
  /** The worker's network. */
  readonly layout: NetLayout;
  /** How long to try each address. */
  readonly connectTimeoutMs: number;
  /** The granted target a scope names, or `undefined`. */
  target(scope: string): NetTarget | undefined;
  /** The addresses a target may be connected to, or why none (bounded in time). */
  addresses(target: NetTarget): Promise<string[] | { refused: string }>;
  /** Publishes one connection's event (when anyone listens). */
  publish(event: Omit<NetConnectionEvent, "pid" | "module">): void;
  /** Publishes a refusal: nothing was connected. */
  refuse(
    started: number,
    target: string,
    found: NetTarget | undefined,
    reason: string,
    bytesOut?: number,
  ): void;
  /** Settles `ready` (once): the sandbox's end listens, or why not. */
  settleReady(error?: Error): void;
  /** Whether the broker was closed. */
  closed(): boolean;
}

/** A broker's data path, as `startNetBroker` composes it. */
export interface BrokerPath {
  /** The unix socket the sandbox binds. */
  readonly socket: string;
  /** Settles once that socket is listening. */
  readonly listening: Promise<void>;
  /** Stops listening and ends every connection. */
  close(): void;
}

/**
 * Starts the broker of one worker: makes its private directory (with the
 * sandbox's hosts and nsswitch files) and listens on its socket there, or
 * registers it with the native relay.
 *
 * @param options The worker's module and network layout.
 * @returns The broker; await `listening` before the worker starts.
 * @throws {Error} when the directory lies where a worker may write (it
 * could replace the socket), naming it and the fix.
 *
 * @example
 * ```ts ignore
 * import { netLayout } from "./targets.ts";
 * import { startNetBroker } from "./broker.ts";
 *
 * const layout = netLayout(["db.internal:5432"]);
 * if ("problem" in layout) throw new Error(layout.problem);
 * const broker = startNetBroker({ module: "db.ts", layout });
 * await broker.listening;
 * broker.close();
 * ```
 */
export function startNetBroker(options: NetBrokerOptions): NetBroker {
  const dir = brokerDir(options.layout);
  let pid: number | undefined;
  let closed = false;
  let readySettled = false;
  let settle!: (error?: Error) => void;
  const ready = new Promise<void>((resolve, reject) => {
    settle = (error) => error === undefined ? resolve() : reject(error);
  });
  ready.catch(() => {});
  const core: BrokerCore = {
    layout: options.layout,
    connectTimeoutMs: options.connectTimeoutMs ?? NET_CONNECT_TIMEOUT_MS,
    ...targetPolicy(options),
    publish(event) {
      const channel = diagnosticsChannel().channel(NET_CONNECTION_CHANNEL);
      if (!channel.hasSubscribers) return;
      channel.publish({ pid, module: options.module, ...event });
    },
    refuse(started, target, found, reason, bytesOut = 0) {
      core.publish({
        target,
        host: found?.host,
        port: found?.port,
        address: undefined,
        bytesOut,
        bytesIn: 0,
        durationMs: performance.now() - started,
        refused: reason,
        error: undefined,
      });
    },
    settleReady(error) {
      if (readySettled) return;
      readySettled = true;
      settle(error);
    },
    closed: () => closed,
  };
  let path: BrokerPath;
  try {
    path = options.relay === undefined
      ? jsPath(core, join(dir.dir, "broker.sock"))
      : nativePath(core, options.relay);
  } catch (error: unknown) {
    rmSync(dir.dir, { recursive: true, force: true });
    throw error;
  }
  return {
    ...dir,
    socket: path.socket,
    listening: path.listening,
    ready,
    setPid(value) {
      pid = value;
    },
    close() {
      if (closed) return;
      closed = true;
      core.settleReady(new Error("the network broker was closed"));
      path.close();
      try {
        rmSync(dir.dir, { recursive: true, force: true });
      } catch {
        // Gone already, or left for the temporary directory's cleaner.
      }
    },
  };
}

/** The broker's private directory (mode 0700) with the sandbox's hosts and nsswitch files. */
function brokerDir(
  layout: NetLayout,
): { dir: string; hostsFile: string; nsswitchFile: string } {
  const dir = mkdtempSync(join(tmpdir(), "airlock-net-"));
  const grant = writableByWorker(dir);
  if (grant !== undefined) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `the network broker's directory "${dir}" lies inside "${grant}", where a worker may write and could replace its socket; set TMPDIR to a directory no worker is granted`,
    );
  }
  const hostsFile = join(dir, "hosts");
  const nsswitchFile = join(dir, "nsswitch.conf");
  writeFileSync(hostsFile, layout.hosts, { mode: 0o644, flag: "wx" });
  writeFileSync(nsswitchFile, SANDBOX_NSSWITCH, { mode: 0o644, flag: "wx" });
  return { dir, hostsFile, nsswitchFile };
}

/**
 * The policy of one worker's broker: its granted targets by scope, and
 * their addresses, resolved by the parent (one lookup per name at once,
 * at most {@linkcode MAX_CONCURRENT_LOOKUPS} in the process, refused past
 * {@linkcode NET_LOOKUP_TIMEOUT_MS}).
 */
function targetPolicy(
  options: NetBrokerOptions,
): Pick<BrokerCore, "target" | "addresses"> {
  const targets = new Map<string, NetTarget>(
    options.layout.targets.map((target) => [target.scope, target]),
  );
  const lookupName = options.lookup ?? defaultLookup;
  /** The lookups of this worker in progress, by name: one per name at once. */
  const resolving = new Map<string, ReturnType<NetLookup>>();
  const lookup: NetLookup = (host) => {
    const shared = resolving.get(host);
    if (shared !== undefined) return shared;
    const found = inLookupSlot(lookupName, host);
    resolving.set(host, found);
    found.then(
      () => resolving.delete(host),
      () => resolving.delete(host),
    );
    return found;
  };
  return {
    target: (scope) => targets.get(scope),
    async addresses(target) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      try {
        return await Promise.race([
          addressesOf(target, lookup),
          new Promise<{ refused: string }>((resolve) => {
            timer = setTimeout(() =>
              resolve({
                refused: `cannot resolve "${target.host}" within ${
                  NET_LOOKUP_TIMEOUT_MS / 1000
                } s`,
              }), NET_LOOKUP_TIMEOUT_MS);
          }),
        ]);
      } catch (error: unknown) {
        return {
          refused: `cannot resolve "${target.host}": ${
            error instanceof Error ? error.message : String(error)
          }`,
        };
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/**
 * The addresses the broker may connect a target to, in order, or why none:
 * an address scope is itself; a name is resolved by the parent, and only
 * its public and private addresses are kept (`localhost` keeps loopback).
 */
async function addressesOf(
  target: NetTarget,
  lookup: NetLookup,
): Promise<string[] | { refused: string }> {
  if (target.kind !== "name") return [target.host];
  const found = await lookup(target.host);
  const kept: string[] = [];
  const dropped: string[] = [];
  for (const { address } of found) {
    const kind = addressClass(address);
    const allowed = kind === "public" || kind === "private" ||
      (kind === "loopback" && target.host === "localhost");
    if (allowed) kept.push(address);
    else dropped.push(`${address} (${kind})`);
  }
  if (kept.length > 0) return kept;
  return {
    refused: found.length === 0
      ? `"${target.host}" resolves to no address`
      : `"${target.host}" resolves only to ${
        dropped.join(", ")
      }, which a granted name may not reach: grant that address itself (e.g. "${
        found[0]?.address.includes(":")
          ? `[${found[0]?.address}]`
          : found[0]?.address
      }:${target.port}") if it is meant`,
  };
}
