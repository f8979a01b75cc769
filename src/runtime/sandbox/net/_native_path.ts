/**
 * The broker's native data path: the worker's native confine step hands
 * its listening sockets to the native relay (`relay.ts`, `native/relay.c`),
 * which tells this side of each connection it accepts (on which listener,
 * so which granted target); the broker checks and resolves the target as
 * for the JavaScript path and tells the relay which address to connect to;
 * the relay splices the bytes and reports them when the connection ends.
 * Private to net/.
 *
 * @module
 */

import {
  type BrokerCore,
  type BrokerPath,
  MAX_NET_CONNECTIONS,
} from "./broker.ts";
import type { RelayClosed, RelayWorker } from "./relay.ts";
import type { NetRelay } from "./relay.ts";

/** Names of the errnos a connection most often ends with. */
const ERRNO_NAMES: Readonly<Record<number, string>> = {
  32: "EPIPE",
  101: "ENETUNREACH",
  103: "ECONNABORTED",
  104: "ECONNRESET",
  110: "ETIMEDOUT",
  111: "ECONNREFUSED",
  113: "EHOSTUNREACH",
};

/** An errno as a message: its name where known. */
export function errnoText(errno: number): string {
  const name = ERRNO_NAMES[errno];
  return name === undefined ? `errno ${errno}` : `${name} (errno ${errno})`;
}

/**
 * Registers the worker with the relay.
 *
 * @param core The broker.
 * @param relay The process's relay.
 * @returns The path: the relay's socket for the handover.
 */
export function nativePath(core: BrokerCore, relay: NetRelay): BrokerPath {
  let listeningSettled = false;
  let settleListening!: (error?: Error) => void;
  const listening = new Promise<void>((resolve, reject) => {
    settleListening = (error) => {
      if (listeningSettled) return;
      listeningSettled = true;
      if (error === undefined) resolve();
      else reject(error);
    };
  });
  listening.catch(() => {});
  // Its events come from the relay's later lines, never during the call.
  const worker: RelayWorker = relay.addWorker(core.layout.listeners, {
    listening: () => settleListening(),
    ready: () => core.settleReady(),
    failed(reason) {
      const error = new Error(`the network relay failed: ${reason}`);
      settleListening(error);
      core.settleReady(error);
    },
    accepted(id, index, closed) {
      void serve(core, worker, { id, index, closed });
    },
    tooMany(index) {
      core.refuse(
        performance.now(),
        core.layout.listeners[index]?.target ?? "",
        undefined,
        `more than ${MAX_NET_CONNECTIONS} connections open at once through the broker`,
      );
    },
  });
  return {
    socket: worker.socket,
    listening,
    close: () => worker.remove(),
  };
}

/** One accepted connection: its target checked and resolved, then connected. */
async function serve(
  core: BrokerCore,
  worker: RelayWorker,
  accepted: { id: number; index: number; closed: Promise<RelayClosed> },
): Promise<void> {
  const started = performance.now();
  const scope = core.layout.listeners[accepted.index]?.target ?? "";
  const target = core.target(scope);
  if (target === undefined) {
    worker.close(accepted.id);
    return core.refuse(
      started,
      scope,
      undefined,
      `"${scope}" is not one of the worker's net grants`,
    );
  }
  const addresses = await core.addresses(target);
  if ("refused" in addresses) {
    worker.close(accepted.id);
    return core.refuse(started, target.scope, target, addresses.refused);
  }
  let last = "";
  for (const address of addresses) {
    if (core.closed()) break;
    const errno = await connectWithin(
      worker,
      accepted.id,
      address,
      target.port,
      core.connectTimeoutMs,
    );
    if (errno === 0) {
      const closed = await accepted.closed;
      core.publish({
        target: target.scope,
        host: target.host,
        port: target.port,
        address,
        bytesOut: closed.out,
        bytesIn: closed.in,
        durationMs: performance.now() - started,
        refused: undefined,
        error: closed.errno === 0 ? undefined : errnoText(closed.errno),
      });
      return;
    }
    last = `${address}: ${
      typeof errno === "string" ? errno : errnoText(errno)
    }`;
  }
  worker.close(accepted.id);
  core.refuse(
    started,
    target.scope,
    target,
    core.closed()
      ? "the worker went away"
      : `cannot connect to "${target.scope}": ${last}`,
  );
}

/** The relay's connect, bounded in time: 0, the errno, or why it gave up. */
async function connectWithin(
  worker: RelayWorker,
  id: number,
  address: string,
  port: number,
  timeoutMs: number,
): Promise<number | string> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const result = await Promise.race([
    worker.connect(id, address, port),
    new Promise<string>((resolve) => {
      timer = setTimeout(
        () => resolve(`no answer within ${timeoutMs} ms`),
        timeoutMs,
      );
    }),
  ]);
  clearTimeout(timer);
  if (typeof result === "string") worker.abandon(id);
  return result;
}
