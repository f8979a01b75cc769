/**
 * The parent side of streaming calls: the values a worker sent and the
 * consumer has not taken yet, the credit owed back to the worker (so it never
 * runs more than a window ahead), and the call handle that is both awaitable
 * and async-iterable, because the parent cannot know before the answer
 * whether an op streams. Private to src/parent. See docs/streaming.md.
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";
import {
  DEFAULT_STREAM_WINDOW_BYTES,
  DEFAULT_STREAM_WINDOW_ITEMS,
} from "../protocol/encode_message.ts";

/** What a streaming call's record resolves with when its stream ended. */
export const STREAM_END: unique symbol = Symbol("airlock.streamEnd");

/** What a stream needs from the connection that carries its call. */
export interface StreamCarrier {
  /**
   * Writes a `credit` message for call `id`.
   *
   * @param id The call.
   * @param items Values consumed since the last credit.
   * @param bytes Payload bytes released since the last credit.
   */
  credit(id: number, items: number, bytes: number): void;
  /**
   * Stops the call's deadline while the parent holds values the consumer
   * has not taken (the worker is not late then), restarts it from now once
   * it holds none: `timeoutMs` bounds the wait for the next value.
   *
   * @param id The call.
   * @param held Whether unconsumed values are held.
   */
  holdDeadline(id: number, held: boolean): void;
}

/** The stream fields of a call record. */
export interface StreamableCall {
  /** The request id. */
  readonly id: number;
  /** The op. */
  readonly op: string;
  /** Values in flight at most. */
  readonly windowItems: number;
  /** Payload bytes in flight at most. */
  readonly windowBytes: number;
  /** Receives the handler's progress reports. */
  readonly onProgress: ((value: unknown) => void) | undefined;
  /** The stream, once the worker sent a value or a consumer started. */
  stream: StreamState | undefined;
  /** Whether its promise has settled. */
  readonly settled: boolean;
  /**
   * Whether the call is awaited as a whole: a stream made later collects,
   * and the stream's end resolves the call with the collected values.
   */
  awaited?: boolean;
}

/**
 * Most values a stream awaited as a whole collects (`call()`, or a handle
 * that is awaited): past it the call is refused (a `ProtocolError`) and
 * cancelled in the worker. Iterating the stream holds at most its window.
 */
export const COLLECT_MAX_ITEMS = 1_000_000;
/**
 * Most payload bytes (as received, `items` messages' heads and attachments)
 * a stream awaited as a whole collects: 64 MiB, refused past it as above.
 */
export const COLLECT_MAX_BYTES: number = 64 * 1024 * 1024;

/** Defaults of the stream fields, for records made without call options. */
export const DEFAULT_WINDOW: { items: number; bytes: number } = {
  items: DEFAULT_STREAM_WINDOW_ITEMS,
  bytes: DEFAULT_STREAM_WINDOW_BYTES,
};

/**
 * The values of one streaming call between the worker and the consumer.
 * Bounded: at most `windowItems` values, and `windowBytes` plus one
 * message's bytes, are held, because the worker sends no more until the
 * consumer takes them and credit goes back.
 */
export class StreamState {
  /** Whether any value arrived (such a call is never retried). */
  delivered = false;
  #call: StreamableCall;
  #carrier: StreamCarrier | undefined;
  /** Values not taken yet, from `#head` on. */
  #values: unknown[] = [];
  #head = 0;
  /** Per `items` message held: values of it not taken yet, and its bytes. */
  #messages: { left: number; bytes: number }[] = [];
  #messageHead = 0;
  /** Values sent by the worker and not credited back (the parent's view). */
  #inFlightItems = 0;
  /** Payload bytes sent and not credited back. */
  #inFlightBytes = 0;
  /** Taken since the last credit. */
  #takenItems = 0;
  /** Released since the last credit. */
  #releasedBytes = 0;
  /** When awaited as a whole: every value goes here at once. */
  #collected: unknown[] | undefined;
  /** Payload bytes of the values collected. */
  #collectedBytes = 0;
  /** Wakes a consumer waiting for a value. */
  #wake: (() => void) | undefined;
  /** Whether the call is over: no credit is owed any more. */
  #closed = false;

  /**
   * Creates the stream of a call.
   *
   * @param call The call record.
   */
  constructor(call: StreamableCall) {
    this.#call = call;
    if (call.awaited) this.#collected = [];
  }

  /** Values held and not yet taken. */
  get held(): number {
    return this.#values.length - this.#head;
  }

  /**
   * Takes an `items` message from the worker.
   *
   * @param values Its values.
   * @param bytes Its payload bytes.
   * @param carrier The connection it came on.
   * @returns `undefined`, or the refusal of a stream awaited as a whole that
   *   passed {@linkcode COLLECT_MAX_ITEMS} or {@linkcode COLLECT_MAX_BYTES}
   *   (the caller cancels the call with it; the values are dropped).
   * @throws {ProtocolError} when the worker sent past its window.
   */
  receive(
    values: unknown[],
    bytes: number,
    carrier: StreamCarrier,
  ): ProtocolError | undefined {
    const call = this.#call;
    if (
      this.#inFlightItems >= call.windowItems ||
      this.#inFlightBytes >= call.windowBytes ||
      values.length > call.windowItems - this.#inFlightItems
    ) {
      throw new ProtocolError(
        `Cannot read message: call "${call.op}" (id ${call.id}) streamed past its window (${
          this.#inFlightItems + values.length
        } values and ${
          this.#inFlightBytes + bytes
        } bytes in flight; window ${call.windowItems} values, ${call.windowBytes} bytes)`,
      );
    }
    this.delivered = true;
    this.#carrier = carrier;
    this.#inFlightItems += values.length;
    this.#inFlightBytes += bytes;
    if (this.#collected) {
      this.#collectedBytes += bytes;
      if (
        this.#collected.length + values.length > COLLECT_MAX_ITEMS ||
        this.#collectedBytes > COLLECT_MAX_BYTES
      ) {
        const count = this.#collected.length + values.length;
        this.#collected = [];
        this.#closed = true;
        return new ProtocolError(
          `Cannot collect call "${call.op}" (id ${call.id}): the stream awaited as a whole passed ${COLLECT_MAX_ITEMS} values or ${COLLECT_MAX_BYTES} bytes (${count} values, ${this.#collectedBytes} bytes); iterate it with for await, which holds at most its window`,
        );
      }
      for (const value of values) this.#collected.push(value);
      this.#takenItems += values.length;
      this.#releasedBytes += bytes;
      // Taken at once: the wait for the next value starts now.
      carrier.holdDeadline(call.id, false);
      this.#maybeCredit();
      return undefined;
    }
    if (this.held === 0) carrier.holdDeadline(call.id, true);
    for (const value of values) this.#values.push(value);
    this.#messages.push({ left: values.length, bytes });
    this.#wakeConsumer();
    return undefined;
  }

  /**
   * Takes the next value, crediting the worker as values are consumed.
   *
   * @returns The value, or `undefined` when none is held.
   */
  take(): { value: unknown } | undefined {
    if (this.#head >= this.#values.length) return undefined;
    const value = this.#values[this.#head];
    this.#values[this.#head] = undefined;
    this.#head++;
    if (this.#head === this.#values.length) {
      this.#values = [];
      this.#head = 0;
    } else if (this.#head >= 1024 && this.#head * 2 >= this.#values.length) {
      this.#values = this.#values.slice(this.#head);
      this.#head = 0;
    }
    this.#takenItems++;
    const message = this.#messages[this.#messageHead];
    if (message && --message.left === 0) {
      this.#releasedBytes += message.bytes;
      this.#messageHead++;
      if (this.#messageHead === this.#messages.length) {
        this.#messages = [];
        this.#messageHead = 0;
      }
    }
    if (this.held === 0) this.#carrier?.holdDeadline(this.#call.id, false);
    this.#maybeCredit();
    return { value };
  }

  /**
   * Switches to collecting: every value held, and every value to come, goes
   * into the returned array (the call was awaited as a whole).
   *
   * @returns The array the values go into.
   */
  collect(): unknown[] {
    if (this.#collected) return this.#collected;
    const collected: unknown[] = [];
    // The values held count toward the bound (at most a window of them).
    for (let m = this.#messageHead; m < this.#messages.length; m++) {
      this.#collectedBytes += this.#messages[m]?.bytes ?? 0;
    }
    for (let item = this.take(); item; item = this.take()) {
      collected.push(item.value);
    }
    this.#collected = collected;
    return collected;
  }

  /**
   * Waits until a value arrives or {@linkcode StreamState.notify} is called.
   *
   * @returns A promise.
   */
  waitForValue(): Promise<void> {
    return new Promise<void>((resolve) => {
      this.#wake = resolve;
    });
  }

  /** Wakes the consumer (the call settled). Ends crediting. */
  notify(): void {
    this.#closed = true;
    this.#wakeConsumer();
  }

  #wakeConsumer(): void {
    const wake = this.#wake;
    this.#wake = undefined;
    wake?.();
  }

  /**
   * Credits the worker once a quarter of either window was consumed, so it
   * rarely waits, and never lets it stall while nothing is held (a quarter
   * of the window is always below the whole of it).
   */
  #maybeCredit(): void {
    if (this.#closed || !this.#carrier) return;
    const call = this.#call;
    if (
      this.#takenItems < Math.max(1, call.windowItems >> 2) &&
      this.#releasedBytes < Math.max(1, Math.floor(call.windowBytes / 4))
    ) {
      return;
    }
    const items = this.#takenItems;
    const bytes = this.#releasedBytes;
    this.#takenItems = 0;
    this.#releasedBytes = 0;
    this.#inFlightItems -= items;
    this.#inFlightBytes -= bytes;
    this.#carrier.credit(call.id, items, bytes);
  }
}

/**
 * The stream of a call record, made on first use.
 *
 * @param call The record.
 * @returns Its stream.
 */
export function streamOf(call: StreamableCall): StreamState {
  return call.stream ??= new StreamState(call);
}

/** How a call ended, as far as its handle knows. */
type Outcome =
  | { kind: "value"; value: unknown }
  | { kind: "end" }
  | { kind: "error"; error: unknown };

function endedEarly(): Error {
  return new DOMException(
    "The stream was ended early by its consumer",
    "AbortError",
  );
}

/**
 * Ends any call of its own with a reason (a mode core): one object for all
 * its handles instead of a closure per call.
 */
export interface CallCanceller {
  /**
   * Ends a call early.
   *
   * @param call The call.
   * @param reason Why.
   */
  cancelCall(call: StreamableCall, reason: unknown): void;
}

/**
 * What a call returns: awaitable like a promise (a streaming op then
 * resolves with all its values in an array), and async-iterable (a
 * streaming op's values one by one, with back-pressure). Ending the
 * iteration early (`break`, `return()`) cancels the call in the worker,
 * which runs the generator's `finally` blocks.
 *
 * @typeParam T What awaiting it gives.
 * @typeParam Item What iterating it gives.
 */
export class CallHandle<T = unknown, Item = unknown>
  implements PromiseLike<T>, AsyncIterable<Item> {
  #call: StreamableCall;
  #settled: Promise<unknown>;
  #cancel: ((reason: unknown) => void) | CallCanceller;
  #outcome: Outcome | undefined;
  #promise: Promise<T> | undefined;
  #consumer: "await" | "iterate" | undefined;

  /**
   * Wraps a call.
   *
   * @param call The record (its stream fields).
   * @param settled Settles as the call does: with the value, with
   *   {@linkcode STREAM_END}, or with the error.
   * @param cancel Ends the call early with a reason (cancels it in the
   *   worker): a function, or the owner of the call.
   */
  constructor(
    call: StreamableCall,
    settled: Promise<unknown>,
    cancel: ((reason: unknown) => void) | CallCanceller,
  ) {
    this.#call = call;
    this.#settled = settled;
    this.#cancel = cancel;
  }

  /** @returns `"CallHandle"`. */
  get [Symbol.toStringTag](): string {
    return "CallHandle";
  }

  #result(): Promise<T> {
    if (this.#promise) return this.#promise;
    if (this.#consumer === "iterate") {
      return Promise.reject(
        new TypeError(
          `Cannot await call "${this.#call.op}": its values are being iterated`,
        ),
      );
    }
    this.#consumer = "await";
    const call = this.#call;
    call.stream?.collect();
    if (!call.settled) {
      // The end of a stream will resolve the call with the values collected:
      // the caller gets the call's own promise, with no step in between (most
      // calls never stream, and their stream state is never made).
      call.awaited = true;
      this.#promise = this.#settled as Promise<T>;
    } else {
      this.#promise = this.#settled.then((value) =>
        (value === STREAM_END ? call.stream?.collect() ?? [] : value) as T
      );
    }
    return this.#promise;
  }

  /**
   * Settles with the call's value (a streaming op: an array of all its
   * values), like a promise.
   *
   * @typeParam A What `onFulfilled` returns.
   * @typeParam B What `onRejected` returns.
   * @param onFulfilled Receives the value.
   * @param onRejected Receives the error.
   * @returns A promise.
   */
  then<A = T, B = never>(
    onFulfilled?: ((value: T) => A | PromiseLike<A>) | null,
    onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    return this.#result().then(onFulfilled, onRejected);
  }

  /**
   * Like `Promise.prototype.catch`.
   *
   * @typeParam B What `onRejected` returns.
   * @param onRejected Receives the error.
   * @returns A promise.
   */
  catch<B = never>(
    onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<T | B> {
    return this.#result().catch(onRejected);
  }

  /**
   * Like `Promise.prototype.finally`.
   *
   * @param onFinally Runs once the call settles.
   * @returns A promise.
   */
  finally(onFinally?: (() => void) | null): Promise<T> {
    return this.#result().finally(onFinally);
  }

  /**
   * The values of a streaming op, one by one. Only one consumer: a call is
   * either iterated once or awaited.
   *
   * @returns The iterator.
   * @throws {TypeError} when the call is already awaited or iterated.
   */
  [Symbol.asyncIterator](): AsyncIterator<Item, undefined> {
    if (this.#consumer !== undefined) {
      throw new TypeError(
        `Cannot iterate call "${this.#call.op}": it is already ${
          this.#consumer === "await" ? "awaited" : "being iterated"
        }`,
      );
    }
    this.#consumer = "iterate";
    const call = this.#call;
    const stream = streamOf(call);
    this.#settled.then(
      (value) => {
        this.#outcome = value === STREAM_END
          ? { kind: "end" }
          : { kind: "value", value };
        stream.notify();
      },
      (error: unknown) => {
        this.#outcome = { kind: "error", error };
        stream.notify();
      },
    );
    let done = false;
    const finish = (): IteratorResult<Item, undefined> => {
      done = true;
      return { done: true, value: undefined };
    };
    return {
      next: async (): Promise<IteratorResult<Item, undefined>> => {
        while (!done) {
          const item = stream.take();
          if (item) return { done: false, value: item.value as Item };
          const outcome = this.#outcome;
          if (outcome) {
            finish();
            if (outcome.kind === "error") throw outcome.error;
            if (outcome.kind === "value") {
              throw new TypeError(
                `Cannot iterate call "${this.#call.op}": the handler returned a value, not a stream (await the call instead)`,
              );
            }
            break;
          }
          await stream.waitForValue();
        }
        return finish();
      },
      return: (): Promise<IteratorResult<Item, undefined>> => {
        if (!done && this.#outcome === undefined) {
          const cancel = this.#cancel;
          if (typeof cancel === "function") cancel(endedEarly());
          else cancel.cancelCall(this.#call, endedEarly());
        }
        return Promise.resolve(finish());
      },
    };
  }
}

/**
 * The handle of a call refused before it was made (closed handle, invalid
 * options): awaiting it and iterating it both fail with `error`.
 *
 * @param op The op.
 * @param error Why it was refused.
 * @returns The handle.
 */
export function refusedCall(op: string, error: unknown): CallHandle {
  const call: StreamableCall = {
    id: 0,
    op,
    windowItems: DEFAULT_WINDOW.items,
    windowBytes: DEFAULT_WINDOW.bytes,
    onProgress: undefined,
    stream: undefined,
    settled: true,
  };
  return new CallHandle(call, Promise.reject(error), () => {});
}
