/**
 * The worker side's serve loop: read frames from stdin, dispatch calls to the
 * handlers with bounded concurrency, honour cancel, drain on shutdown, exit
 * on end-of-file. What it writes goes through the outbox (`_outbox.ts`), a
 * stream's values through the pump (`_stream_pump.ts`), progress through
 * the throttle (`_progress.ts`).
 *
 * @module
 */

import { FrameReader } from "../protocol/frame_reader.ts";
import {
  type CallMessage,
  CONTROL_ID,
  decodeMessage,
  type Message,
  MESSAGE_VERSION,
} from "../protocol/messages.ts";
import { encodeMessage } from "../protocol/encode_message.ts";
import { DEFAULT_MAX_FRAME_BYTES } from "../protocol/frame_header.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import type { CallContext, WorkerDefinition } from "./define_worker.ts";
import { Outbox } from "./_outbox.ts";
import {
  flushProgress,
  type ProgressState,
  reportProgress,
} from "./_progress.ts";
import {
  cancel,
  credit,
  pump,
  streamOf,
  type StreamState,
} from "./_stream_pump.ts";

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

/** A call in flight: what its cancel, credit and progress need. */
interface Running extends StreamState, ProgressState {}

/** A definition's handlers, as the loop calls them. */
type Handlers = Record<
  string,
  (this: CallContext, ...args: unknown[]) => unknown
>;

/** Reports a call's progress (through the throttle). */
type Report = (id: number, state: Running, value: unknown) => void;

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
  #report: Report;
  #progress: ((value: unknown) => void) | undefined;

  constructor(
    call: CallMessage,
    state: Running,
    report: Report,
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
 * use, which otherwise falls on its first call (an idle one-shot spare's
 * call shows it; done here, after the hello, while the parent reads it). No
 * handler runs.
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

/** The serve loop's state: the calls running and waiting, and shutdown. */
class Server {
  readonly #definition: WorkerDefinition;
  readonly #adapter: RuntimeAdapter;
  readonly #outbox: Outbox;
  readonly #handlers: Handlers;
  readonly ops: string[];
  /** Calls run at once: the definition's, or less if the parent limits it. */
  concurrency: number;
  /** Whether the parent sent `limit` (it writes calls ahead). */
  #limited = false;
  /** The pid the parent reports this worker under (the `pid` message). */
  #pid: number;
  /**
   * Calls holding a slot: running, or (under `limit`) answered and not yet
   * written.
   */
  #active = 0;
  /**
   * The calls that went asynchronous (a thenable or a stream), which a
   * cancel or credit may still reach. A call answered in the turn it
   * started is never here: nothing can reach it meanwhile, and a map entry
   * made and removed per call costs its table's churn. A call's abort
   * controller is made only when its handler first reads `this.signal` or a
   * cancel arrives: most handlers never look.
   */
  readonly #running = new Map<number, Running>();
  readonly #waiting: CallMessage[] = [];
  #shuttingDown = false;
  #onDrained: (() => void) | undefined;
  readonly #report: Report;

  constructor(
    definition: WorkerDefinition,
    adapter: RuntimeAdapter,
    outbox: Outbox,
  ) {
    this.#definition = definition;
    this.#adapter = adapter;
    this.#outbox = outbox;
    this.#handlers = definition.handlers as Handlers;
    this.ops = Object.keys(this.#handlers);
    this.concurrency = definition.concurrency;
    this.#pid = adapter.pid();
    this.#report = (id, state, value) =>
      reportProgress(outbox, id, state, value);
  }

  /** Handles one message from the parent. */
  handle(message: Message): void {
    switch (message.type) {
      case "call":
        if (this.#shuttingDown) {
          void this.#outbox.send({
            type: "error",
            id: message.id,
            error: shutdownError(message.op),
          });
        } else if (this.#active < this.concurrency) {
          this.#run(message);
        } else {
          this.#waiting.push(message);
        }
        return;
      case "cancel":
        return this.#cancel(message.id);
      case "credit": {
        const state = this.#running.get(message.id);
        if (state) credit(state, message.items, message.bytes);
        return;
      }
      case "ping":
        // Answered from the event loop: a handler stuck in synchronous code
        // keeps this from running, which is what the parent checks.
        void this.#outbox.send({ type: "pong", id: CONTROL_ID });
        return;
      case "pid":
        // The host's pid: inside a sandbox's pid namespace ours is not it.
        this.#pid = message.pid;
        return;
      case "limit":
        // Queued calls start in arrival order as slots free up: the parent
        // knows from this which calls it wrote ahead had not started.
        this.concurrency = Math.min(
          this.#definition.concurrency,
          message.concurrency,
        );
        this.#limited = true;
        return;
      case "shutdown":
        return this.#shutdown();
      default:
        this.#outbox.warn(
          `ignoring unexpected "${message.type}" message from the parent`,
        );
    }
  }

  /** A cancel: a running call's signal aborts; a waiting one is dropped. */
  #cancel(id: number): void {
    const state = this.#running.get(id);
    if (state) {
      cancel(state, cancelReason());
      return;
    }
    const index = this.#waiting.findIndex((call) => call.id === id);
    if (index === -1) return;
    this.#waiting.splice(index, 1);
    // Never started: the parent learns it was not run.
    void this.#outbox.send({ type: "dropped", id });
    this.#checkDrained();
  }

  /** Refuses new calls, answers the shutdown once the running ones end, exits. */
  #shutdown(): void {
    if (this.#shuttingDown) return;
    this.#shuttingDown = true;
    new Promise<void>((resolve) => {
      this.#onDrained = resolve;
      this.#checkDrained();
    }).then(async () => {
      await this.#outbox.send({ type: "shutdown-ack", id: CONTROL_ID });
      this.#adapter.exit(0);
    });
  }

  #checkDrained(): void {
    if (
      this.#onDrained && this.#active === 0 && this.#waiting.length === 0
    ) this.#onDrained();
  }

  /**
   * Runs a call. A handler that returns a plain value is answered in the
   * same turn (no promise per call); a thenable is awaited.
   */
  #run(call: CallMessage): void {
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
    this.#active++;
    let value: unknown;
    try {
      const handler = this.#handlers[call.op];
      if (!handler || !Object.hasOwn(this.#handlers, call.op)) {
        throw unknownOpError(call.op, this.ops);
      }
      value = handler.apply(
        new Context(call, state, this.#report, this.#pid),
        call.args,
      );
    } catch (error: unknown) {
      this.#fail(call, state, error);
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
        this.#fail(call, state, error);
        return;
      }
    }
    if (typeof then !== "function") {
      this.#settle(call, state, value);
      return;
    }
    this.#adopt(call, state, value);
  }

  /**
   * A promise or any thenable: adopted as `await` would. A cancel reaches
   * it from now on.
   */
  #adopt(call: CallMessage, state: Running, value: unknown): void {
    this.#running.set(call.id, state);
    let adopted: Promise<unknown>;
    try {
      adopted = Promise.resolve(value);
    } catch (error: unknown) {
      // A promise whose `constructor` getter throws.
      this.#fail(call, state, error);
      return;
    }
    adopted.then(
      (settled) => this.#settle(call, state, settled),
      (error: unknown) => this.#fail(call, state, error),
    );
  }

  /** {@linkcode Server.#answer}, or a failure with what it threw (a hostile value). */
  #settle(call: CallMessage, state: Running, value: unknown): void {
    try {
      this.#answer(call, state, value);
    } catch (error: unknown) {
      this.#fail(call, state, error);
    }
  }

  /** Answers a call with its handler's value (a stream: its values, then `end`). */
  #answer(call: CallMessage, state: Running, value: unknown): void {
    const iterator = streamOf(value);
    if (iterator) {
      // Credit and cancel reach it from now on.
      this.#running.set(call.id, state);
      pump(call, state, iterator, this.#outbox).then(() => {
        flushProgress(this.#outbox, call.id, state);
        this.#release(
          call.id,
          state,
          this.#outbox.send({ type: "end", id: call.id }),
        );
      }, (error: unknown) => this.#fail(call, state, error));
      return;
    }
    flushProgress(this.#outbox, call.id, state);
    // Written in order after anything sent before (send() never rejects).
    this.#release(
      call.id,
      state,
      this.#outbox.send({ type: "result", id: call.id, value }),
    );
  }

  /** Answers a call with what its handler threw (or rejected with). */
  #fail(call: CallMessage, state: Running, error: unknown): void {
    flushProgress(this.#outbox, call.id, state);
    this.#release(
      call.id,
      state,
      this.#outbox.send({ type: "error", id: call.id, error }),
    );
  }

  /**
   * Ends a call: frees its slot and starts the next waiting call. Under
   * `limit` the slot frees only once the answer is written (`sent`): the
   * parent counts a call written ahead as never started while an answer
   * before it is missing, so a worker killed with the answer still in its
   * writer must not have started the next one.
   */
  #release(id: number, state: Running, sent: Promise<void>): void {
    if (this.#limited) sent.then(() => this.#free(id, state));
    else this.#free(id, state);
  }

  #free(id: number, state: Running): void {
    state.done = true;
    if (this.#running.size > 0) this.#running.delete(id);
    this.#active--;
    const next = this.#waiting.shift();
    if (next) this.#run(next);
    else this.#checkDrained();
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
  const outbox = new Outbox(stdio, adapter);
  const server = new Server(definition, adapter, outbox);
  // The protocol's bound on what the worker reads (frames from the parent,
  // which it trusts), as the Python worker has it; the parent's
  // `maxFrameBytes` option bounds what the parent reads from the worker.
  const reader = new FrameReader({
    maxFrameBytes: DEFAULT_MAX_FRAME_BYTES,
    onFrame: (frame) => server.handle(decodeMessage(frame)),
    onStray: (bytes) => {
      outbox.warn(`ignoring ${bytes.byteLength} stray bytes on stdin`);
    },
  });

  await outbox.send({
    type: "hello",
    id: CONTROL_ID,
    version: MESSAGE_VERSION,
    pid: adapter.pid(),
    ops: server.ops,
    runtime: `${adapter.name} ${adapter.version}`,
    concurrency: server.concurrency,
    idempotent: [...definition.idempotent],
  });

  warmCallPath();

  try {
    for await (const chunk of stdio.input) reader.push(chunk);
  } catch (error: unknown) {
    outbox.warn(
      `cannot read from the parent: ${
        error instanceof Error ? error.message : String(error)
      }`,
    );
    return adapter.exit(2);
  }
  // End-of-file: the parent is gone (or closed our stdin). Exit promptly.
  return adapter.exit(0);
}
