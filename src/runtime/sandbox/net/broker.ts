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
import { type Listener, netIo, pump, type Stream } from "./_io.ts";

/** The diagnostics channel of the broker's connections: {@linkcode NetConnectionEvent}. */
export const NET_CONNECTION_CHANNEL = "airlock:net:connection";

/** The most connections one worker may have open through the broker at once. */
export const MAX_NET_CONNECTIONS = 256;

/** How long a connection may take to name its target. */
export const NET_HEADER_TIMEOUT_MS = 10_000;

/** How long the broker tries to connect to one address of a target. */
export const NET_CONNECT_TIMEOUT_MS = 10_000;

/** The longest first line a connection may send (its target). */
const MAX_HEADER_BYTES = 512;

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
}

/** A running broker: what the sandbox binds in, and its lifecycle. */
export interface NetBroker {
  /** The private directory (mode 0700) holding the socket and the files below. */
  readonly dir: string;
  /** The unix socket the forwarder connects to. */
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
 * Starts the broker of one worker: makes its private directory (with the
 * sandbox's hosts and nsswitch files) and listens on its socket there.
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
  const dir = mkdtempSync(join(tmpdir(), "airlock-net-"));
  const grant = writableByWorker(dir);
  if (grant !== undefined) {
    rmSync(dir, { recursive: true, force: true });
    throw new Error(
      `the network broker's directory "${dir}" lies inside "${grant}", where a worker may write and could replace its socket; set TMPDIR to a directory no worker is granted`,
    );
  }
  const socket = join(dir, "broker.sock");
  const hostsFile = join(dir, "hosts");
  const nsswitchFile = join(dir, "nsswitch.conf");
  writeFileSync(hostsFile, options.layout.hosts, { mode: 0o644, flag: "wx" });
  writeFileSync(nsswitchFile, SANDBOX_NSSWITCH, { mode: 0o644, flag: "wx" });

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
  const connectTimeoutMs = options.connectTimeoutMs ?? NET_CONNECT_TIMEOUT_MS;
  let pid: number | undefined;
  let closed = false;
  let server: Listener | undefined;
  const open = new Set<Stream>();
  /** Connections from the sandbox being served (each may have an upstream in `open`). */
  let clients = 0;

  let readyResolve!: () => void;
  let readyReject!: (error: Error) => void;
  let readySettled = false;
  const ready = new Promise<void>((resolve, reject) => {
    readyResolve = resolve;
    readyReject = reject;
  });
  ready.catch(() => {});
  const settleReady = (error?: Error): void => {
    if (readySettled) return;
    readySettled = true;
    if (error === undefined) readyResolve();
    else readyReject(error);
  };

  const publish = (event: Omit<NetConnectionEvent, "pid" | "module">) => {
    const channel = diagnosticsChannel().channel(NET_CONNECTION_CHANNEL);
    if (!channel.hasSubscribers) return;
    channel.publish({ pid, module: options.module, ...event });
  };

  const serve = async (client: Stream): Promise<void> => {
    const started = performance.now();
    const refuse = (
      target: string,
      found: NetTarget | undefined,
      reason: string,
      bytesOut = 0,
    ): void => {
      publish({
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
    };
    if (clients > MAX_NET_CONNECTIONS) {
      return refuse(
        "",
        undefined,
        `more than ${MAX_NET_CONNECTIONS} connections open at once through the broker`,
      );
    }
    const header = await readHeader(client);
    if (header === undefined) {
      return refuse(
        "",
        undefined,
        `the connection named no target within ${
          NET_HEADER_TIMEOUT_MS / 1000
        } s or sent more than ${MAX_HEADER_BYTES} bytes first`,
      );
    }
    const { line, rest } = header;
    if (line === "ready") {
      settleReady();
      // The control connection stays open while the forwarder lives.
      try {
        while ((await client.read()) !== null) {
          // Nothing more is expected on it.
        }
      } catch {
        // Gone.
      }
      return settleReady(new Error("the network forwarder exited"));
    }
    if (line.startsWith("error ")) {
      return settleReady(
        new Error(`the network forwarder failed: ${line.slice(6)}`),
      );
    }
    const target = targets.get(line);
    if (target === undefined) {
      return refuse(
        line,
        undefined,
        `"${line}" is not one of the worker's net grants`,
      );
    }
    let addresses: string[] | { refused: string };
    let lookupTimer: ReturnType<typeof setTimeout> | undefined;
    try {
      addresses = await Promise.race([
        addressesOf(target, lookup),
        new Promise<{ refused: string }>((resolve) => {
          lookupTimer = setTimeout(() =>
            resolve({
              refused: `cannot resolve "${target.host}" within ${
                NET_LOOKUP_TIMEOUT_MS / 1000
              } s`,
            }), NET_LOOKUP_TIMEOUT_MS);
        }),
      ]);
    } catch (error: unknown) {
      addresses = {
        refused: `cannot resolve "${target.host}": ${
          error instanceof Error ? error.message : String(error)
        }`,
      };
    } finally {
      clearTimeout(lookupTimer);
    }
    if ("refused" in addresses) {
      return refuse(target.scope, target, addresses.refused, rest.byteLength);
    }
    let last = "";
    for (const address of addresses) {
      if (closed) break;
      let upstream: Stream;
      try {
        upstream = await netIo().connectTcp(
          address,
          target.port,
          connectTimeoutMs,
        );
      } catch (error: unknown) {
        last = `${address}: ${
          error instanceof Error ? error.message : String(error)
        }`;
        continue;
      }
      open.add(upstream);
      try {
        if (closed) break;
        const counts = { out: rest.byteLength, in: 0 };
        const error = await relay(client, upstream, rest, counts);
        publish({
          target: target.scope,
          host: target.host,
          port: target.port,
          address,
          bytesOut: counts.out,
          bytesIn: counts.in,
          durationMs: performance.now() - started,
          refused: undefined,
          error,
        });
        return;
      } finally {
        upstream.close();
        open.delete(upstream);
      }
    }
    refuse(
      target.scope,
      target,
      closed
        ? "the worker went away"
        : `cannot connect to "${target.scope}": ${last}`,
      rest.byteLength,
    );
  };

  const onStream = (client: Stream): void => {
    if (closed) {
      client.close();
      return;
    }
    open.add(client);
    clients++;
    serve(client).catch(() => {}).finally(() => {
      clients--;
      client.close();
      open.delete(client);
    });
  };

  const listening = netIo().listenUnix(socket, onStream).then((listener) => {
    server = listener;
    if (closed) listener.close();
  });
  listening.catch(() => {});

  return {
    dir,
    socket,
    hostsFile,
    nsswitchFile,
    listening,
    ready,
    setPid(value) {
      pid = value;
    },
    close() {
      if (closed) return;
      closed = true;
      settleReady(new Error("the network broker was closed"));
      server?.close();
      for (const stream of open) stream.close();
      open.clear();
      try {
        rmSync(dir, { recursive: true, force: true });
      } catch {
        // Gone already, or left for the temporary directory's cleaner.
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

/**
 * Relays both ways (each direction: read, write, wait until the socket took
 * it: backpressure), passing an end on as a half-close, until both
 * directions ended or either failed.
 *
 * @returns The error that ended it, or `undefined`.
 */
async function relay(
  client: Stream,
  upstream: Stream,
  first: Uint8Array,
  counts: { out: number; in: number },
): Promise<string | undefined> {
  try {
    if (first.byteLength > 0) await upstream.write(first);
    await Promise.all([
      pump(client, upstream, (n) => (counts.out += n)),
      pump(upstream, client, (n) => (counts.in += n)),
    ]);
    return undefined;
  } catch (error: unknown) {
    client.close();
    upstream.close();
    return error instanceof Error ? error.message : String(error);
  }
}

/**
 * Reads the first line of a connection (at most {@linkcode MAX_HEADER_BYTES},
 * within {@linkcode NET_HEADER_TIMEOUT_MS}) and the bytes after it;
 * `undefined` when it ended, failed or ran past either bound first.
 */
async function readHeader(
  stream: Stream,
): Promise<{ line: string; rest: Uint8Array } | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), NET_HEADER_TIMEOUT_MS);
  });
  const reading = (async () => {
    let all = new Uint8Array(0);
    while (true) {
      const chunk = await stream.read();
      if (chunk === null) return undefined;
      const joined = new Uint8Array(all.byteLength + chunk.byteLength);
      joined.set(all);
      joined.set(chunk, all.byteLength);
      all = joined;
      const newline = all.indexOf(10);
      if (newline > MAX_HEADER_BYTES) return undefined;
      if (newline >= 0) {
        return {
          line: new TextDecoder().decode(all.subarray(0, newline)),
          rest: all.subarray(newline + 1),
        };
      }
      if (all.byteLength > MAX_HEADER_BYTES) return undefined;
    }
  })().catch(() => undefined);
  try {
    return await Promise.race([reading, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
