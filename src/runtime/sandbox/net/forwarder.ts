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

import { type Listener, type NetIo, netIo, pump, type Stream } from "./_io.ts";

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
 * @param io The runtime's sockets.
 * @returns Once the broker went away.
 */
export async function runForwarder(
  spec: ForwarderSpec,
  io: NetIo,
): Promise<void> {
  const listeners: Listener[] = [];
  let failure: string | undefined;
  for (const listener of spec.listeners) {
    try {
      listeners.push(
        await io.listenTcp(
          listener.address,
          listener.port,
          (client) => void forward(io, spec.socket, listener.target, client),
        ),
      );
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
  }
  const control = await io.connectUnix(spec.socket);
  await control.write(
    new TextEncoder().encode(
      failure === undefined ? "ready\n" : `error ${failure.slice(0, 400)}\n`,
    ),
  );
  try {
    while ((await control.read()) !== null) {
      // The broker says nothing more; its end is the forwarder's.
    }
  } catch {
    // Gone.
  }
  for (const listener of listeners) listener.close();
}

async function forward(
  io: NetIo,
  socket: string,
  target: string,
  client: Stream,
): Promise<void> {
  let upstream: Stream | undefined;
  try {
    upstream = await io.connectUnix(socket);
    await upstream.write(new TextEncoder().encode(`${target}\n`));
    const to = upstream;
    await Promise.all([pump(client, to, () => {}), pump(to, client, () => {})]);
  } catch {
    // Either side went away: end both.
  } finally {
    client.close();
    upstream?.close();
  }
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
  // Deno's own API on Deno: touching `process` there would start its Node
  // compatibility, about 25 ms of CPU at every start.
  const global = globalThis as unknown as {
    Bun?: unknown;
    Deno?: {
      args: string[];
      exit(code: number): never;
      stderr: { writeSync(bytes: Uint8Array): number };
    };
    process: {
      argv: string[];
      exit(code: number): never;
      stderr: { write(text: string): boolean };
    };
  };
  const deno = global.Bun === undefined ? global.Deno : undefined;
  const exit = (code: number): never =>
    deno ? deno.exit(code) : global.process.exit(code);
  try {
    const args = deno ? deno.args : global.process.argv;
    await runForwarder(parseSpec(args.at(-1)), netIo());
    exit(0);
  } catch (error: unknown) {
    const message = `airlock net forwarder: ${
      error instanceof Error ? error.message : String(error)
    }\n`;
    if (deno) deno.stderr.writeSync(new TextEncoder().encode(message));
    else global.process.stderr.write(message);
    exit(1);
  }
}
