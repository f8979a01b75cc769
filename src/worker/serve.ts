/**
 * The worker side's serve loop: read frames from stdin, dispatch calls to the
 * handlers with bounded concurrency, write answers to stdout, honour cancel,
 * drain on shutdown, exit on end-of-file.
 *
 * @module
 */

import { FrameReader } from "../protocol/frame.ts";
import {
  type CallMessage,
  CONTROL_ID,
  decodeMessage,
  encodeMessage,
  type Message,
} from "../protocol/messages.ts";
import { PROTOCOL_VERSION } from "../protocol/frame.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { CallContext, WorkerDefinition } from "./define_worker.ts";

/** Options of {@linkcode serve}. */
export interface ServeOptions {
  /** Largest frame accepted from the parent. */
  maxFrameBytes?: number;
}

function shutdownError(op: string): Error {
  const error = new Error(
    `Cannot run "${op}": the worker is shutting down and accepts no new calls`,
  );
  error.name = "ShutdownError";
  return error;
}

function unknownOpError(op: string, ops: readonly string[]): TypeError {
  return new TypeError(
    `Unknown op "${op}": this worker serves ${
      ops.length ? ops.map((name) => `"${name}"`).join(", ") : "no ops"
    }`,
  );
}

function cancelReason(): Error {
  return new DOMException("The call was cancelled by the parent", "AbortError");
}

/**
 * Serves a definition on this process's stdin and stdout until shutdown or
 * end-of-file, then exits the process.
 *
 * @param definition What to serve.
 * @param adapter The runtime's adapter.
 * @param options Frame size cap.
 * @returns Never: the process exits.
 */
export async function serve(
  definition: WorkerDefinition,
  adapter: RuntimeAdapter,
  options: ServeOptions = {},
): Promise<never> {
  const stdio = adapter.workerStdio();
  const handlers = definition.handlers as Record<
    string,
    (this: CallContext, ...args: unknown[]) => unknown
  >;
  const ops = Object.keys(handlers);
  const concurrency = definition.concurrency;
  /**
   * The calls running, with their abort controllers. A controller is made
   * when the handler first reads `this.signal` or a cancel arrives: most
   * handlers never look, and one costs ~0.2 µs per call on Bun.
   */
  const running = new Map<
    number,
    { controller: AbortController | undefined }
  >();
  const waiting: CallMessage[] = [];
  let shuttingDown = false;
  let onDrained: (() => void) | undefined;

  const send = (message: Message): Promise<void> => {
    let chunks: Uint8Array[];
    try {
      chunks = encodeMessage(message);
    } catch (error: unknown) {
      if (message.type === "result") {
        // The value cannot cross: answer with the TypeError naming where.
        return send({ type: "error", id: message.id, error });
      }
      throw error;
    }
    return stdio.write(chunks).catch(() => {
      // stdout is gone: the parent is gone.
      adapter.exit(0);
    });
  };

  const checkDrained = (): void => {
    if (onDrained && running.size === 0 && waiting.length === 0) onDrained();
  };

  const run = async (call: CallMessage): Promise<void> => {
    const state: { controller: AbortController | undefined } = {
      controller: undefined,
    };
    running.set(call.id, state);
    try {
      const handler = handlers[call.op];
      if (!handler || !Object.hasOwn(handlers, call.op)) {
        throw unknownOpError(call.op, ops);
      }
      const context: CallContext = {
        get signal(): AbortSignal {
          return (state.controller ??= new AbortController()).signal;
        },
        op: call.op,
        id: call.id,
      };
      const value = await handler.apply(context, call.args);
      await send({ type: "result", id: call.id, value });
    } catch (error: unknown) {
      await send({ type: "error", id: call.id, error });
    } finally {
      running.delete(call.id);
      const next = waiting.shift();
      if (next) void run(next);
      else checkDrained();
    }
  };

  const handle = (message: Message): void => {
    switch (message.type) {
      case "call":
        if (shuttingDown) {
          void send({
            type: "error",
            id: message.id,
            error: shutdownError(message.op),
          });
        } else if (running.size < concurrency) {
          void run(message);
        } else {
          waiting.push(message);
        }
        return;
      case "cancel": {
        const state = running.get(message.id);
        if (state) {
          (state.controller ??= new AbortController()).abort(cancelReason());
          return;
        }
        const index = waiting.findIndex((call) => call.id === message.id);
        if (index !== -1) {
          const [call] = waiting.splice(index, 1);
          if (call) {
            void send({ type: "error", id: call.id, error: cancelReason() });
          }
          checkDrained();
        }
        return;
      }
      case "shutdown":
        if (shuttingDown) return;
        shuttingDown = true;
        new Promise<void>((resolve) => {
          onDrained = resolve;
          checkDrained();
        }).then(async () => {
          await send({ type: "shutdown-ack", id: CONTROL_ID });
          adapter.exit(0);
        });
        return;
      default:
        adapter.writeStderr(
          `airlock worker: ignoring unexpected "${message.type}" message from the parent\n`,
        );
    }
  };

  const reader = new FrameReader({
    ...(options.maxFrameBytes ? { maxFrameBytes: options.maxFrameBytes } : {}),
    onFrame: (frame) => handle(decodeMessage(frame)),
    onStray: (bytes) => {
      adapter.writeStderr(
        `airlock worker: ignoring ${bytes.byteLength} stray bytes on stdin\n`,
      );
    },
  });

  await send({
    type: "hello",
    id: CONTROL_ID,
    version: PROTOCOL_VERSION,
    pid: adapter.pid(),
    ops,
    runtime: `${adapter.name} ${adapter.version}`,
    concurrency,
    idempotent: [...definition.idempotent],
  });

  try {
    for await (const chunk of stdio.input) reader.push(chunk);
  } catch (error: unknown) {
    adapter.writeStderr(
      `airlock worker: cannot read from the parent: ${
        error instanceof Error ? error.message : String(error)
      }\n`,
    );
    return adapter.exit(2);
  }
  // End-of-file: the parent is gone (or closed our stdin). Exit promptly.
  return adapter.exit(0);
}
