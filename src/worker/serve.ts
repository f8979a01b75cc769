/**
 * The worker side's serve loop: read frames from stdin, dispatch calls to the
 * handlers with bounded concurrency, write answers to stdout, stream the
 * values of generator handlers within the parent's credit window, throttle
 * progress, honour cancel, drain on shutdown, exit on end-of-file.
 *
 * @module
 */

import { FrameReader } from "../protocol/frame.ts";
import {
  type CallMessage,
  CONTROL_ID,
  decodeMessage,
  DEFAULT_STREAM_WINDOW_BYTES,
  DEFAULT_STREAM_WINDOW_ITEMS,
  encodeMessage,
  type Message,
  MESSAGE_VERSION,
  PROGRESS_INTERVAL_MS,
} from "../protocol/messages.ts";
import {
  DEFAULT_MAX_FRAME_BYTES,
  FRAME_HEADER_BYTES,
} from "../protocol/frame.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { CallContext, WorkerDefinition } from "./define_worker.ts";

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

/** Most values in one `items` message. */
const MAX_BATCH_ITEMS = 256;

/** A call in flight, with what its cancel, credit and progress need. */
interface Running {
  /** Made on first use of `this.signal`, or by a cancel. */
  controller: AbortController | undefined;
  /** Set by a cancel: a stream stops pulling values. */
  cancelled: boolean;
  /** Values sent minus values credited. */
  inFlightItems: number;
  /** Payload bytes sent minus bytes credited. */
  inFlightBytes: number;
  /** Wakes a stream waiting for credit or for its cancel. */
  wake: (() => void) | undefined;
  /** When the last progress message went out. */
  progressAt: number;
  /** A progress value held back by the throttle. */
  progressPending: { value: unknown } | undefined;
  /** Sends the held-back progress value. */
  progressTimer: ReturnType<typeof setTimeout> | undefined;
  /** Set once its slot is free: later progress is dropped. */
  done: boolean;
}

/**
 * The values of a handler's answer, if it streams: an async iterable (an
 * async generator, a `ReadableStream`, …) or a generator object. Arrays,
 * strings and other plain iterables are values, not streams.
 */
function streamOf(
  value: unknown,
): AsyncIterator<unknown> | Iterator<unknown> | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  const asyncIterator = (value as { [Symbol.asyncIterator]?: unknown })[
    Symbol.asyncIterator
  ];
  if (typeof asyncIterator === "function") {
    return asyncIterator.call(value) as AsyncIterator<unknown>;
  }
  if (Object.prototype.toString.call(value) === "[object Generator]") {
    return value as Iterator<unknown>;
  }
  return undefined;
}

/**
 * A handler's `this`. `signal` and `progress` are made on first use: most
 * handlers never look, and a closure and an object literal with an accessor
 * per call cost on every call.
 */
class Context implements CallContext {
  readonly op: string;
  readonly id: number;
  readonly traceContext: CallContext["traceContext"];
  readonly pid: number;
  #state: Running;
  #report: (id: number, state: Running, value: unknown) => void;
  #progress: ((value: unknown) => void) | undefined;

  constructor(
    call: CallMessage,
    state: Running,
    report: (id: number, state: Running, value: unknown) => void,
    pid: number,
  ) {
    this.op = call.op;
    this.id = call.id;
    this.traceContext = call.trace;
    this.pid = pid;
    this.#state = state;
    this.#report = report;
  }

  get signal(): AbortSignal {
    return (this.#state.controller ??= new AbortController()).signal;
  }

  /** Bound to its call: `const { progress } = this` works too. */
  get progress(): (value: unknown) => void {
    return this.#progress ??= (value: unknown) =>
      this.#report(this.id, this.#state, value);
  }
}

/**
 * Runs a call's frame through the frame reader and the decoder, and encodes
 * a result, once, writing nothing: a new process compiles that code on first
 * use, which otherwise falls on its first call (about 1.5 ms of an idle
 * one-shot spare's call; done here, after the hello, while the parent reads
 * it). No handler runs.
 */
function warmCallPath(): void {
  try {
    const reader = new FrameReader({
      maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
      onFrame: (frame) => void decodeMessage(frame),
      onStray: () => {},
    });
    const call: CallMessage = { type: "call", id: 1, op: "", args: [0, ""] };
    for (const chunk of encodeMessage(call)) reader.push(chunk);
    encodeMessage({ type: "result", id: 1, value: 0 });
  } catch {
    // Only a warm-up: the real call reports its own errors.
  }
}

/**
 * Serves a definition on this process's stdin and stdout until shutdown or
 * end-of-file, then exits the process.
 *
 * @param definition What to serve.
 * @param adapter The runtime's adapter.
 * @returns Never: the process exits.
 */
export async function serve(
  definition: WorkerDefinition,
  adapter: RuntimeAdapter,
): Promise<never> {
  const stdio = adapter.workerStdio();
  const handlers = definition.handlers as Record<
    string,
    (this: CallContext, ...args: unknown[]) => unknown
  >;
  const ops = Object.keys(handlers);
  /** Calls run at once: the definition's, or less if the parent limits it. */
  let concurrency = definition.concurrency;
  /** Whether the parent sent `limit` (it writes calls ahead). */
  let limited = false;
  /** The pid the parent reports this worker under (the `pid` message). */
  let pid = adapter.pid();
  /**
   * Calls holding a slot: running, or (under `limit`) answered and not yet
   * written.
   */
  let active = 0;
  /**
   * The calls that went asynchronous (a thenable or a stream), which a
   * cancel or credit may still reach, with their abort controllers. A call
   * answered in the turn it started is never here: nothing can reach it
   * meanwhile (a map entry made and removed per call cost its table's
   * churn). A controller is made when the handler first reads `this.signal`
   * or a cancel arrives: most handlers never look, and one costs ~0.2 µs
   * per call on Bun.
   */
  const running = new Map<number, Running>();
  const waiting: CallMessage[] = [];
  let shuttingDown = false;
  let onDrained: (() => void) | undefined;

  /** The last write's promise, and the same never rejecting. */
  let lastWrite: Promise<void> | undefined;
  let lastSent: Promise<void> = Promise.resolve();
  const writeFailed = (): void => {
    // stdout is gone: the parent is gone.
    adapter.exit(0);
  };

  const send = (message: Message): Promise<void> => {
    let chunks: Uint8Array[];
    try {
      chunks = encodeMessage(message);
    } catch (error: unknown) {
      if (message.type === "result") {
        // The value cannot cross: answer with the TypeError naming where.
        return send({ type: "error", id: message.id, error });
      }
      if (message.type === "error") {
        // The thrown value cannot cross (a getter that throws…): the call
        // still gets an answer, one that always encodes.
        return send({
          type: "error",
          id: message.id,
          error: new TypeError(
            `Cannot send the value the handler threw to the parent: ${
              reason(error)
            }`,
          ),
        });
      }
      throw error;
    }
    // Messages sent in one turn share one write (and its promise): one
    // handler per write, not per message.
    const written = stdio.write(chunks);
    if (written !== lastWrite) {
      lastWrite = written;
      lastSent = written.catch(writeFailed);
    }
    return lastSent;
  };

  const checkDrained = (): void => {
    if (onDrained && active === 0 && waiting.length === 0) onDrained();
  };

  /** Sends the progress value the throttle held back, if any. */
  const flushProgress = (id: number, state: Running): void => {
    if (state.progressTimer !== undefined) clearTimeout(state.progressTimer);
    state.progressTimer = undefined;
    const pending = state.progressPending;
    if (!pending) return;
    state.progressPending = undefined;
    state.progressAt = Date.now();
    const report = (error: unknown): void => {
      adapter.writeStderr(
        `airlock worker: cannot send progress of call ${id}: ${
          error instanceof Error ? error.message : String(error)
        }\n`,
      );
    };
    try {
      send({ type: "progress", id, value: pending.value }).catch(report);
    } catch (error: unknown) {
      // A held-back value that cannot cross: the handler has moved on.
      report(error);
    }
  };

  /**
   * Reports progress: at once if the last report is older than the
   * throttle's interval, else the latest value goes when it ends (or before
   * the call's answer).
   */
  const progress = (id: number, state: Running, value: unknown): void => {
    if (state.done) return;
    state.progressPending = { value };
    const wait = state.progressAt + PROGRESS_INTERVAL_MS - Date.now();
    if (wait <= 0) {
      // Encoded now, so a value that cannot cross throws into the handler.
      state.progressPending = undefined;
      state.progressAt = Date.now();
      void send({ type: "progress", id, value }).catch(() => {});
      return;
    }
    state.progressTimer ??= setTimeout(() => flushProgress(id, state), wait);
  };

  /**
   * Sends a streaming handler's values in `items` messages, never more than
   * the call's window ahead of the parent's credit, then `end`; a cancel
   * stops it and runs the generator's `finally` blocks.
   */
  const pump = async (
    call: CallMessage,
    state: Running,
    iterator: AsyncIterator<unknown> | Iterator<unknown>,
  ): Promise<void> => {
    const windowItems = call.windowItems ?? DEFAULT_STREAM_WINDOW_ITEMS;
    const windowBytes = call.windowBytes ?? DEFAULT_STREAM_WINDOW_BYTES;
    let batch: unknown[] = [];
    let bytesPerItem = 0;
    /** A value that could not cross, set by `flush` (also from a timer). */
    const fault: { failed: boolean; error: unknown } = {
      failed: false,
      error: undefined,
    };
    let timer: ReturnType<typeof setTimeout> | undefined;
    /** Sends the batch; a value that cannot cross fails the stream. */
    const flush = (): void => {
      if (timer !== undefined) clearTimeout(timer);
      timer = undefined;
      if (batch.length === 0 || fault.failed) return;
      const values = batch;
      batch = [];
      let chunks: Uint8Array[];
      try {
        chunks = encodeMessage({ type: "items", id: call.id, values });
      } catch (error: unknown) {
        fault.failed = true;
        fault.error = error;
        state.wake?.();
        return;
      }
      let bytes = -FRAME_HEADER_BYTES;
      for (const chunk of chunks) bytes += chunk.byteLength;
      bytesPerItem = bytes / values.length;
      state.inFlightItems += values.length;
      state.inFlightBytes += bytes;
      stdio.write(chunks).catch(() => adapter.exit(0));
    };
    /** How many more values the next batch may take. */
    const room = (): number => {
      const items = windowItems - state.inFlightItems - batch.length;
      const bytes = windowBytes - state.inFlightBytes;
      if (items <= 0 || bytes <= 0) return 0;
      // The first message carries one value, so that the size of values is
      // known before a batch of them can overshoot the window.
      const byBytes = bytesPerItem > 0
        ? Math.max(1, Math.floor(bytes / bytesPerItem)) - batch.length
        : 1 - batch.length;
      return Math.min(items, byBytes, MAX_BATCH_ITEMS - batch.length);
    };
    let finished = false;
    try {
      while (true) {
        if (room() <= 0) {
          flush();
          while (
            !state.cancelled && !fault.failed &&
            (state.inFlightItems >= windowItems ||
              state.inFlightBytes >= windowBytes)
          ) {
            await new Promise<void>((resolve) => {
              state.wake = resolve;
            });
            state.wake = undefined;
          }
        }
        if (state.cancelled) throw state.controller?.signal.reason;
        if (fault.failed) throw fault.error;
        const step = await iterator.next();
        if (state.cancelled) throw state.controller?.signal.reason;
        if (fault.failed) throw fault.error;
        if (step.done) {
          finished = true;
          break;
        }
        batch.push(step.value);
        // A slow generator: send what is here once the event loop turns.
        if (batch.length === 1) timer = setTimeout(flush, 0);
      }
      flush();
      if (fault.failed) throw fault.error;
    } catch (error: unknown) {
      if (timer !== undefined) clearTimeout(timer);
      if (!finished && !state.cancelled) flush();
      if (!finished) {
        // Runs the generator's finally blocks (a no-op once it threw).
        try {
          await iterator.return?.();
        } catch {
          // The cancel or the first error is what the parent hears.
        }
      }
      throw error;
    }
  };

  /**
   * Ends a call: frees its slot and starts the next waiting call. Under
   * `limit` the slot frees only once the answer is written (`sent`): the
   * parent counts a call written ahead as never started while an answer
   * before it is missing, so a worker killed with the answer still in its
   * writer must not have started the next one.
   */
  const release = (id: number, state: Running, sent: Promise<void>): void => {
    if (limited) sent.then(() => free(id, state));
    else free(id, state);
  };

  const free = (id: number, state: Running): void => {
    state.done = true;
    if (running.size > 0) running.delete(id);
    active--;
    const next = waiting.shift();
    if (next) run(next);
    else checkDrained();
  };

  /** Answers a call with its handler's value (a stream: its values, then `end`). */
  const answer = (call: CallMessage, state: Running, value: unknown): void => {
    const iterator = streamOf(value);
    if (iterator) {
      // Credit and cancel reach it from now on.
      running.set(call.id, state);
      pump(call, state, iterator).then(() => {
        flushProgress(call.id, state);
        release(call.id, state, send({ type: "end", id: call.id }));
      }, (error: unknown) => fail(call, state, error));
      return;
    }
    flushProgress(call.id, state);
    // Written in order after anything sent before (send() never rejects).
    release(call.id, state, send({ type: "result", id: call.id, value }));
  };

  /** Answers a call with what its handler threw (or rejected with). */
  const fail = (call: CallMessage, state: Running, error: unknown): void => {
    flushProgress(call.id, state);
    release(call.id, state, send({ type: "error", id: call.id, error }));
  };

  /**
   * Runs a call. A handler that returns a plain value is answered in the
   * same turn (no promise per call); a thenable is awaited.
   */
  const run = (call: CallMessage): void => {
    const state: Running = {
      controller: undefined,
      cancelled: false,
      inFlightItems: 0,
      inFlightBytes: 0,
      wake: undefined,
      progressAt: 0,
      progressPending: undefined,
      progressTimer: undefined,
      done: false,
    };
    active++;
    let value: unknown;
    try {
      const handler = handlers[call.op];
      if (!handler || !Object.hasOwn(handlers, call.op)) {
        throw unknownOpError(call.op, ops);
      }
      value = handler.apply(
        new Context(call, state, progress, pid),
        call.args,
      );
    } catch (error: unknown) {
      fail(call, state, error);
      return;
    }
    let then: unknown;
    if (
      (typeof value === "object" && value !== null) ||
      typeof value === "function"
    ) {
      try {
        then = (value as { then?: unknown }).then;
      } catch (error: unknown) {
        // A `then` getter that throws: as `await` would, the call fails.
        fail(call, state, error);
        return;
      }
    }
    if (typeof then !== "function") {
      settle(call, state, value);
      return;
    }
    // A promise or any thenable: adopted as `await` would. A cancel reaches
    // it from now on.
    running.set(call.id, state);
    let adopted: Promise<unknown>;
    try {
      adopted = Promise.resolve(value);
    } catch (error: unknown) {
      // A promise whose `constructor` getter throws.
      fail(call, state, error);
      return;
    }
    adopted.then(
      (settled) => settle(call, state, settled),
      (error: unknown) => fail(call, state, error),
    );
  };

  /** {@linkcode answer}, or {@linkcode fail} with what it threw (a hostile value). */
  const settle = (call: CallMessage, state: Running, value: unknown): void => {
    try {
      answer(call, state, value);
    } catch (error: unknown) {
      fail(call, state, error);
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
        } else if (active < concurrency) {
          run(message);
        } else {
          waiting.push(message);
        }
        return;
      case "cancel": {
        const state = running.get(message.id);
        if (state) {
          (state.controller ??= new AbortController()).abort(cancelReason());
          state.cancelled = true;
          state.wake?.();
          return;
        }
        const index = waiting.findIndex((call) => call.id === message.id);
        if (index !== -1) {
          const [call] = waiting.splice(index, 1);
          // Never started: the parent learns it was not run.
          if (call) void send({ type: "dropped", id: call.id });
          checkDrained();
        }
        return;
      }
      case "credit": {
        const state = running.get(message.id);
        if (!state) return;
        state.inFlightItems = Math.max(0, state.inFlightItems - message.items);
        state.inFlightBytes = Math.max(0, state.inFlightBytes - message.bytes);
        state.wake?.();
        return;
      }
      case "ping":
        // Answered from the event loop: a handler stuck in synchronous code
        // keeps this from running, which is what the parent checks.
        void send({ type: "pong", id: CONTROL_ID });
        return;
      case "pid":
        // The host's pid: inside a sandbox's pid namespace ours is not it.
        pid = message.pid;
        return;
      case "limit":
        // Queued calls start in arrival order as slots free up: the parent
        // knows from this which calls it wrote ahead had not started.
        concurrency = Math.min(definition.concurrency, message.concurrency);
        limited = true;
        return;
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

  // The protocol's bound on what the worker reads (frames from the parent,
  // which it trusts), as the Python worker has it; the parent's
  // `maxFrameBytes` option bounds what the parent reads from the worker.
  const reader = new FrameReader({
    maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
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
    version: MESSAGE_VERSION,
    pid: adapter.pid(),
    ops,
    runtime: `${adapter.name} ${adapter.version}`,
    concurrency,
    idempotent: [...definition.idempotent],
  });

  warmCallPath();

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

/** The message of what encoding threw, read without trusting it. */
function reason(error: unknown): string {
  try {
    if (error instanceof Error && typeof error.message === "string") {
      return error.message;
    }
  } catch {
    // A hostile error whose message getter throws.
  }
  return "it cannot be encoded";
}
