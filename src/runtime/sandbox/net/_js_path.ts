/**
 * The broker's JavaScript data path: the forwarder in the sandbox (a
 * runtime program the runtime confine step starts) connects to the
 * broker's own unix socket once per connection, names the target on the
 * first line, and this side relays the stream both ways with the
 * runtime's own sockets (`_io.ts`). Used where the native confine step
 * does not run (`AIRLOCK_RUNTIME_CONFINE_STEP=1`, the `--bind-fds` step).
 * Private to net/.
 *
 * @module
 */

import {
  type BrokerCore,
  type BrokerPath,
  MAX_HEADER_BYTES,
  MAX_NET_CONNECTIONS,
  NET_HEADER_TIMEOUT_MS,
} from "./broker.ts";
import type { NetTarget } from "./targets.ts";
import { type Listener, netIo, pump, type Stream } from "./_io.ts";

/**
 * Listens on `socket` for the forwarder's connections.
 *
 * @param core The broker.
 * @param socket The unix socket's path (in the broker's private directory).
 * @returns The path.
 */
export function jsPath(core: BrokerCore, socket: string): BrokerPath {
  let server: Listener | undefined;
  let stopped = false;
  const open = new Set<Stream>();
  /** Connections from the sandbox being served (each may have an upstream in `open`). */
  let clients = 0;
  const onStream = (client: Stream): void => {
    if (stopped) {
      client.close();
      return;
    }
    open.add(client);
    clients++;
    serve(core, client, clients, open).catch(() => {}).finally(() => {
      clients--;
      client.close();
      open.delete(client);
    });
  };
  const listening = netIo().listenUnix(socket, onStream).then((listener) => {
    server = listener;
    if (stopped) listener.close();
  });
  listening.catch(() => {});
  return {
    socket,
    listening,
    close() {
      stopped = true;
      server?.close();
      for (const stream of open) stream.close();
      open.clear();
    },
  };
}

/** Serves one connection from the forwarder: its first line, then its target. */
async function serve(
  core: BrokerCore,
  client: Stream,
  clients: number,
  open: Set<Stream>,
): Promise<void> {
  const started = performance.now();
  if (clients > MAX_NET_CONNECTIONS) {
    return core.refuse(
      started,
      "",
      undefined,
      `more than ${MAX_NET_CONNECTIONS} connections open at once through the broker`,
    );
  }
  const header = await readHeader(client);
  if (header === undefined) {
    return core.refuse(
      started,
      "",
      undefined,
      `the connection named no target within ${
        NET_HEADER_TIMEOUT_MS / 1000
      } s or sent more than ${MAX_HEADER_BYTES} bytes first`,
    );
  }
  const { line, rest } = header;
  if (line === "ready") {
    core.settleReady();
    // The control connection stays open while the forwarder lives.
    try {
      while ((await client.read()) !== null) {
        // Nothing more is expected on it.
      }
    } catch {
      // Gone.
    }
    return core.settleReady(new Error("the network forwarder exited"));
  }
  if (line.startsWith("error ")) {
    return core.settleReady(
      new Error(`the network forwarder failed: ${line.slice(6)}`),
    );
  }
  const target = core.target(line);
  if (target === undefined) {
    return core.refuse(
      started,
      line,
      undefined,
      `"${line}" is not one of the worker's net grants`,
    );
  }
  const addresses = await core.addresses(target);
  if ("refused" in addresses) {
    return core.refuse(
      started,
      target.scope,
      target,
      addresses.refused,
      rest.byteLength,
    );
  }
  await connectAndRelay(
    core,
    { client, rest, started },
    target,
    addresses,
    open,
  );
}

/** Connects to the first address that answers and relays; publishes either way. */
async function connectAndRelay(
  core: BrokerCore,
  from: { client: Stream; rest: Uint8Array; started: number },
  target: NetTarget,
  addresses: readonly string[],
  open: Set<Stream>,
): Promise<void> {
  let last = "";
  for (const address of addresses) {
    if (core.closed()) break;
    let upstream: Stream;
    try {
      upstream = await netIo().connectTcp(
        address,
        target.port,
        core.connectTimeoutMs,
      );
    } catch (error: unknown) {
      last = `${address}: ${
        error instanceof Error ? error.message : String(error)
      }`;
      continue;
    }
    open.add(upstream);
    try {
      if (core.closed()) break;
      const counts = { out: from.rest.byteLength, in: 0 };
      const error = await relay(from.client, upstream, from.rest, counts);
      core.publish({
        target: target.scope,
        host: target.host,
        port: target.port,
        address,
        bytesOut: counts.out,
        bytesIn: counts.in,
        durationMs: performance.now() - from.started,
        refused: undefined,
        error,
      });
      return;
    } finally {
      upstream.close();
      open.delete(upstream);
    }
  }
  core.refuse(
    from.started,
    target.scope,
    target,
    core.closed()
      ? "the worker went away"
      : `cannot connect to "${target.scope}": ${last}`,
    from.rest.byteLength,
  );
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
