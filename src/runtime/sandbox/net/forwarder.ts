/**
 * The forwarder: a small program that runs inside a worker's sandbox, in
 * its network namespace (only loopback), as a process of its own beside the
 * worker, so that a client blocking the worker's main thread (a synchronous
 * native driver) never stalls it. It listens on one loopback address and
 * port per granted target (a granted name's address is in the sandbox's
 * hosts file) and carries each connection over the broker's unix socket to
 * the parent, naming the target first. It enforces nothing: the broker
 * checks every target against the worker's grants, so a forwarder the
 * worker tampers with can only lose the worker its connections.
 *
 * Run as `<runtime> forwarder.ts <spec>`, the spec a JSON
 * {@linkcode ForwarderSpec}. Once every listener is up it says `ready` on a
 * control connection to the broker and keeps that open; it exits when the
 * broker closes it.
 *
 * @module
 */

import type * as Net from "node:net";

/** What the forwarder listens on and where it forwards to. */
export interface ForwarderSpec {
  /** The broker's unix socket, as the sandbox shows it. */
  readonly socket: string;
  /** One listener per address and port. */
  readonly listeners: readonly {
    readonly address: string;
    readonly port: number;
    readonly target: string;
  }[];
}

/**
 * Runs the forwarder until the broker closes its control connection.
 *
 * @param spec What to listen on.
 * @param net `node:net`.
 * @returns Once the broker went away.
 */
export async function runForwarder(
  spec: ForwarderSpec,
  net: typeof Net,
): Promise<void> {
  const servers: Net.Server[] = [];
  let failure: string | undefined;
  for (const listener of spec.listeners) {
    const server = net.createServer(
      { allowHalfOpen: true, pauseOnConnect: true },
      (client) => forward(net, spec.socket, listener.target, client),
    );
    try {
      await new Promise<void>((resolve, reject) => {
        server.once("error", reject);
        server.listen({ host: listener.address, port: listener.port }, () => {
          server.off("error", reject);
          resolve();
        });
      });
    } catch (error: unknown) {
      failure = `cannot listen on ${
        listener.address.includes(":")
          ? `[${listener.address}]`
          : listener.address
      }:${listener.port}: ${
        error instanceof Error ? error.message : String(error)
      }`;
      break;
    }
    servers.push(server);
  }
  const control = net.connect({ path: spec.socket });
  control.on("error", () => {});
  control.write(
    failure === undefined ? "ready\n" : `error ${failure.slice(0, 400)}\n`,
  );
  await new Promise<void>((resolve) => {
    control.on("data", () => {});
    control.once("close", () => resolve());
  });
  for (const server of servers) server.close();
}

function forward(
  net: typeof Net,
  socket: string,
  target: string,
  client: Net.Socket,
): void {
  const upstream = net.connect({ path: socket, allowHalfOpen: true });
  const end = (): void => {
    client.destroy();
    upstream.destroy();
  };
  client.on("error", end);
  upstream.on("error", end);
  client.once("close", () => upstream.destroyed || upstream.end());
  upstream.once("close", () => client.destroyed || client.end());
  client.setNoDelay(true);
  upstream.write(`${target}\n`);
  client.pipe(upstream);
  upstream.pipe(client);
  client.resume();
}

/** The forwarder's argument, parsed; throws on anything else. */
function parseSpec(text: string | undefined): ForwarderSpec {
  const value: unknown = JSON.parse(text ?? "");
  const spec = value as ForwarderSpec;
  if (
    typeof spec !== "object" || spec === null ||
    typeof spec.socket !== "string" || !Array.isArray(spec.listeners) ||
    !spec.listeners.every((l) =>
      typeof l?.address === "string" && Number.isInteger(l.port) &&
      typeof l.target === "string"
    )
  ) {
    throw new TypeError("expected a forwarder spec");
  }
  return spec;
}

if (import.meta.main) {
  const global = globalThis as unknown as {
    process: {
      argv: string[];
      getBuiltinModule(id: string): unknown;
      exit(code: number): never;
      stderr: { write(text: string): boolean };
    };
  };
  const nodeProcess = global.process;
  try {
    const spec = parseSpec(nodeProcess.argv.at(-1));
    await runForwarder(
      spec,
      nodeProcess.getBuiltinModule("node:net") as typeof Net,
    );
    nodeProcess.exit(0);
  } catch (error: unknown) {
    nodeProcess.stderr.write(
      `airlock net forwarder: ${
        error instanceof Error ? error.message : String(error)
      }\n`,
    );
    nodeProcess.exit(1);
  }
}
