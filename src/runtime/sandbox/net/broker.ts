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

import type * as Net from "node:net";
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

/** A Node built-in, loaded on first use (never at import). */
function builtin<T>(id: string): T {
  return (globalThis as unknown as {
    process: { getBuiltinModule(id: string): unknown };
  }).process.getBuiltinModule(id) as T;
}

function net(): typeof Net {
  return builtin<typeof Net>("node:net");
}

function defaultLookup(host: string): ReturnType<NetLookup> {
  return builtin<typeof Dns>("node:dns").promises.lookup(host, {
    all: true,
    verbatim: true,
  });
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
  const lookup = options.lookup ?? defaultLookup;
  const connectTimeoutMs = options.connectTimeoutMs ?? NET_CONNECT_TIMEOUT_MS;
  let pid: number | undefined;
  let closed = false;
  const open = new Set<Net.Socket>();

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

  const server = net().createServer({ allowHalfOpen: true }, (client) => {
    if (closed) {
      client.destroy();
      return;
    }
    open.add(client);
    client.once("close", () => open.delete(client));
    const started = performance.now();
    if (open.size > MAX_NET_CONNECTIONS) {
      client.destroy();
      publish({
        target: "",
        host: undefined,
        port: undefined,
        address: undefined,
        bytesOut: 0,
        bytesIn: 0,
        durationMs: performance.now() - started,
        refused:
          `more than ${MAX_NET_CONNECTIONS} connections open at once through the broker`,
        error: undefined,
      });
      return;
    }
    readHeader(client, (line, rest) => {
      if (line === undefined) {
        client.destroy();
        return;
      }
      if (line === "ready") {
        settleReady();
        // The control connection stays open while the forwarder lives.
        client.on("data", () => {});
        client.once(
          "close",
          () => settleReady(new Error("the network forwarder exited")),
        );
        return;
      }
      if (line.startsWith("error ")) {
        settleReady(
          new Error(`the network forwarder failed: ${line.slice(6)}`),
        );
        client.destroy();
        return;
      }
      const target = targets.get(line);
      if (target === undefined) {
        client.destroy();
        publish({
          target: line,
          host: undefined,
          port: undefined,
          address: undefined,
          bytesOut: 0,
          bytesIn: 0,
          durationMs: performance.now() - started,
          refused: `"${line}" is not one of the worker's net grants`,
          error: undefined,
        });
        return;
      }
      relay(client, rest, target, started);
    }, () => {
      publish({
        target: "",
        host: undefined,
        port: undefined,
        address: undefined,
        bytesOut: 0,
        bytesIn: 0,
        durationMs: performance.now() - started,
        refused: `the connection named no target within ${
          NET_HEADER_TIMEOUT_MS / 1000
        } s or sent more than ${MAX_HEADER_BYTES} bytes first`,
        error: undefined,
      });
    });
  });

  const relay = (
    client: Net.Socket,
    rest: Uint8Array,
    target: NetTarget,
    started: number,
  ): void => {
    const base = {
      target: target.scope,
      host: target.host,
      port: target.port,
    };
    const refuse = (reason: string): void => {
      client.destroy();
      publish({
        ...base,
        address: undefined,
        bytesOut: rest.byteLength,
        bytesIn: 0,
        durationMs: performance.now() - started,
        refused: reason,
        error: undefined,
      });
    };
    // Hold what the worker sends until the server is connected.
    client.pause();
    addressesOf(target, lookup).then(async (addresses) => {
      if ("refused" in addresses) return refuse(addresses.refused);
      let last = "";
      for (const address of addresses) {
        if (closed || client.destroyed) return refuse("the worker went away");
        const upstream = await connectTo(
          address,
          target.port,
          connectTimeoutMs,
        );
        if ("error" in upstream) {
          last = `${address}: ${upstream.error}`;
          continue;
        }
        pipeBoth(client, upstream.socket, rest, (error) => {
          publish({
            ...base,
            address,
            bytesOut: upstream.socket.bytesWritten,
            bytesIn: client.bytesWritten,
            durationMs: performance.now() - started,
            refused: undefined,
            error,
          });
        });
        open.add(upstream.socket);
        upstream.socket.once("close", () => open.delete(upstream.socket));
        return;
      }
      refuse(`cannot connect to "${target.scope}": ${last}`);
    }, (error: unknown) => {
      refuse(
        `cannot resolve "${target.host}": ${
          error instanceof Error ? error.message : String(error)
        }`,
      );
    });
  };

  const listening = new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socket, () => {
      server.off("error", reject);
      resolve();
    });
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
      server.close();
      for (const socket of open) socket.destroy();
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

function connectTo(
  address: string,
  port: number,
  timeoutMs: number,
): Promise<{ socket: Net.Socket } | { error: string }> {
  return new Promise((resolve) => {
    const socket = net().connect({
      host: address,
      port,
      allowHalfOpen: true,
      noDelay: true,
    });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ error: `no answer within ${timeoutMs} ms` });
    }, timeoutMs);
    socket.once("connect", () => {
      clearTimeout(timer);
      socket.removeAllListeners("error");
      resolve({ socket });
    });
    socket.once("error", (error: Error) => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ error: error.message });
    });
  });
}

/**
 * Relays both ways with backpressure (`pipe`: a side whose peer cannot take
 * more is paused); an end is passed on as a half-close; an error on either
 * side ends both. `done` runs once both are closed.
 */
function pipeBoth(
  client: Net.Socket,
  upstream: Net.Socket,
  first: Uint8Array,
  done: (error: string | undefined) => void,
): void {
  let error: string | undefined;
  let closedSides = 0;
  const onClose = (): void => {
    if (++closedSides === 2) done(error);
  };
  const onError = (cause: Error): void => {
    error ??= cause.message;
    client.destroy();
    upstream.destroy();
  };
  client.on("error", onError);
  upstream.on("error", onError);
  client.once("close", onClose);
  upstream.once("close", onClose);
  // A side that closes entirely (not a half-close) ends the other.
  client.once("close", () => upstream.destroyed || upstream.end());
  upstream.once("close", () => client.destroyed || client.end());
  upstream.setNoDelay(true);
  if (first.byteLength > 0) upstream.write(first);
  client.pipe(upstream);
  upstream.pipe(client);
  client.resume();
}

/**
 * Reads the first line of a connection (at most {@linkcode MAX_HEADER_BYTES},
 * within {@linkcode NET_HEADER_TIMEOUT_MS}), then hands it and the bytes
 * after it on; `line` is `undefined` when the connection ended first.
 */
function readHeader(
  socket: Net.Socket,
  onLine: (line: string | undefined, rest: Uint8Array) => void,
  onRefused: () => void,
): void {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const timer = setTimeout(() => {
    finish();
    socket.destroy();
    onRefused();
  }, NET_HEADER_TIMEOUT_MS);
  const finish = (): void => {
    clearTimeout(timer);
    socket.off("data", onData);
    socket.off("end", onEnd);
    socket.off("error", onEnd);
  };
  const onEnd = (): void => {
    finish();
    onLine(undefined, new Uint8Array(0));
  };
  const onData = (chunk: Uint8Array): void => {
    chunks.push(chunk);
    size += chunk.byteLength;
    const all = chunks.length === 1 ? chunk : concat(chunks, size);
    const newline = all.indexOf(10);
    if (newline < 0) {
      if (size > MAX_HEADER_BYTES) {
        finish();
        socket.destroy();
        onRefused();
      }
      return;
    }
    if (newline > MAX_HEADER_BYTES) {
      finish();
      socket.destroy();
      onRefused();
      return;
    }
    finish();
    socket.pause();
    const line = new TextDecoder().decode(all.subarray(0, newline));
    onLine(line, all.subarray(newline + 1));
  };
  socket.on("data", onData);
  socket.once("end", onEnd);
  socket.once("error", onEnd);
}

function concat(chunks: readonly Uint8Array[], size: number): Uint8Array {
  const all = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    all.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return all;
}
