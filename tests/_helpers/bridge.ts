/**
 * A programmatic transport for the tests: workers started by a bridge
 * process (tests/fixtures/transport_bridge.ts) over a TCP connection on
 * loopback, the way an API client (Kubernetes exec, a container engine)
 * would start them, with no local CLI and no local process per worker.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import { connect, type Socket } from "node:net";
import process from "node:process";
import type { WorkerTransport } from "../../mod.ts";
import type { TransportProcess } from "../../types.ts";
import { RUNTIME } from "./runtime.ts";

const STDOUT = 1;
const STDERR = 2;
const EXIT = 3;
const STARTED = 4;
const ERROR = 5;

/** A running bridge. */
export interface Bridge {
  /** Its port on 127.0.0.1. */
  readonly port: number;
  /** Its process. */
  readonly process: ChildProcess;
  /** Ends it with SIGKILL (its workers see end-of-file); resolves once it is gone. */
  kill(): Promise<void>;
}

/**
 * Starts a bridge process and waits until it listens.
 *
 * @param port A port to listen on (0: any).
 * @returns The bridge.
 */
export function startBridge(port = 0): Promise<Bridge> {
  const script = new URL("../fixtures/transport_bridge.ts", import.meta.url)
    .pathname;
  const argv = RUNTIME === "deno"
    ? ["run", "-A", script, String(port)]
    : [script, String(port)];
  const child = spawn(process.execPath, argv, {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const gone = new Promise<void>((resolve) =>
    child.once("exit", () => resolve())
  );
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout?.on("data", (data: Buffer) => {
      out += data.toString("utf8");
      const found = /listening (\d+)\n/.exec(out);
      if (found === null) return;
      resolve({
        port: Number(found[1]),
        process: child,
        kill: () => {
          if (child.exitCode === null && child.signalCode === null) {
            child.kill("SIGKILL");
          }
          return gone;
        },
      });
    });
    child.once(
      "exit",
      (code) => reject(new Error(`bridge exited (${code}): ${out}`)),
    );
  });
}

/** What the tests see of the transport's starts. */
export interface BridgeLog {
  /** The far side's pid of each worker started, in order. */
  readonly pids: number[];
  /** How many starts were asked for. */
  starts: number;
  /** Drops each connection of a live worker, as a lost network would. */
  drop?: () => void;
}

/**
 * The transport of a bridge on `port`: each start is one TCP connection.
 * The end of stdin half-closes it; `kill` drops it (the bridge then ends
 * the worker's stdin, as ssh's server does when its client is gone).
 *
 * @param port The bridge's port.
 * @param log Where the starts are recorded.
 * @returns The transport.
 */
export function bridgeTransport(
  port: number,
  log: BridgeLog = { pids: [], starts: 0 },
): WorkerTransport {
  const sockets = new Set<Socket>();
  log.drop = () => {
    for (const socket of sockets) socket.destroy();
  };
  return {
    name: `bridge 127.0.0.1:${port}`,
    start(request) {
      log.starts++;
      return new Promise<TransportProcess>((resolve, reject) => {
        const socket = connect({
          host: "127.0.0.1",
          port,
          allowHalfOpen: true,
        });
        sockets.add(socket);
        let stdout!: ReadableStreamDefaultController<Uint8Array>;
        let stderr!: ReadableStreamDefaultController<Uint8Array>;
        let settleExit!: (
          status: { code: number | null; signal: string | null },
        ) => void;
        const exited = new Promise<
          { code: number | null; signal: string | null }
        >(
          (done) => {
            settleExit = done;
          },
        );
        let started = false;
        let killedBy: string | null = null;
        const closeStreams = () => {
          try {
            stdout.close();
          } catch { /* closed */ }
          try {
            stderr.close();
          } catch { /* closed */ }
        };
        const process: TransportProcess = {
          stdin: new WritableStream<Uint8Array>({
            write: (chunk) =>
              new Promise<void>((done, fail) =>
                socket.write(chunk, (error) => (error ? fail(error) : done()))
              ),
            close: () => {
              socket.end();
            },
            abort: () => {
              socket.end();
            },
          }),
          stdout: new ReadableStream<Uint8Array>({
            start: (controller) => {
              stdout = controller;
            },
          }),
          stderr: new ReadableStream<Uint8Array>({
            start: (controller) => {
              stderr = controller;
            },
          }),
          exited,
          kill: (signal) => {
            killedBy ??= signal;
            socket.destroy();
          },
        };
        let buffer = new Uint8Array(0);
        socket.on("data", (data: Buffer) => {
          const joined = new Uint8Array(buffer.length + data.length);
          joined.set(buffer);
          joined.set(data, buffer.length);
          buffer = joined;
          while (buffer.length >= 5) {
            const length = new DataView(buffer.buffer, buffer.byteOffset)
              .getUint32(1);
            if (buffer.length < 5 + length) break;
            const type = buffer[0];
            const payload = buffer.slice(5, 5 + length);
            buffer = buffer.slice(5 + length);
            const json = () => JSON.parse(new TextDecoder().decode(payload));
            if (type === STDOUT) stdout.enqueue(payload);
            else if (type === STDERR) stderr.enqueue(payload);
            else if (type === STARTED) {
              started = true;
              log.pids.push(json().pid);
              resolve(process);
            } else if (type === EXIT) {
              closeStreams();
              settleExit(json());
            } else if (type === ERROR) {
              reject(new Error(`the bridge cannot start it: ${json()}`));
            }
          }
        });
        socket.on("error", (error) => {
          if (!started) reject(error);
        });
        // Half-open: the bridge's end (after the exit, or because it is
        // gone) ends the connection; nothing more can come.
        socket.on("end", () => socket.destroy());
        socket.on("close", () => {
          sockets.delete(socket);
          if (!started) reject(new Error("the bridge closed the connection"));
          closeStreams();
          // The connection is gone before the exit was reported: as ssh
          // does, report the end of the client.
          settleExit({ code: null, signal: killedBy ?? "SIGHUP" });
        });
        socket.once("connect", () => {
          socket.write(
            JSON.stringify({
              argv: request.argv,
              env: request.env,
              cwd: request.cwd,
            }) + "\n",
          );
        });
      });
    },
  };
}
