/**
 * The worker's half of a stream (the parent's is `parent/_stream.ts`): a
 * streaming handler's values go out in `items` messages, never more than the
 * call's window ahead of the parent's credit, then `end`; a cancel stops the
 * pump and runs the generator's `finally` blocks.
 *
 * @module
 */

import type { CallMessage } from "../protocol/messages.ts";
import {
  DEFAULT_STREAM_WINDOW_BYTES,
  DEFAULT_STREAM_WINDOW_ITEMS,
  encodeMessage,
} from "../protocol/encode_message.ts";
import { FRAME_HEADER_BYTES } from "../protocol/frame_header.ts";
import type { Outbox } from "./_outbox.ts";

/** Most values in one `items` message. */
const MAX_BATCH_ITEMS = 256;

/** A call's window and cancel state (kept on the call's record). */
export interface StreamState {
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
}

/**
 * The values of a handler's answer, if it streams: an async iterable (an
 * async generator, a `ReadableStream`, …) or a generator object. Arrays,
 * strings and other plain iterables are values, not streams.
 */
export function streamOf(
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

/** The parent's credit for values it has taken: the window opens again. */
export function credit(state: StreamState, items: number, bytes: number): void {
  state.inFlightItems = Math.max(0, state.inFlightItems - items);
  state.inFlightBytes = Math.max(0, state.inFlightBytes - bytes);
  state.wake?.();
}

/** The parent's cancel: the handler's signal aborts, a stream stops. */
export function cancel(state: StreamState, reason: unknown): void {
  (state.controller ??= new AbortController()).abort(reason);
  state.cancelled = true;
  state.wake?.();
}

/** The values pulled and not yet sent, and what sending them taught. */
class Batch {
  values: unknown[] = [];
  /** A value that could not cross, set by `flush` (also from a timer). */
  failed = false;
  error: unknown = undefined;
  timer: ReturnType<typeof setTimeout> | undefined;
  #bytesPerItem = 0;
  #id: number;
  #state: StreamState;
  #outbox: Outbox;
  readonly windowItems: number;
  readonly windowBytes: number;

  constructor(call: CallMessage, state: StreamState, outbox: Outbox) {
    this.#id = call.id;
    this.#state = state;
    this.#outbox = outbox;
    this.windowItems = call.windowItems ?? DEFAULT_STREAM_WINDOW_ITEMS;
    this.windowBytes = call.windowBytes ?? DEFAULT_STREAM_WINDOW_BYTES;
  }

  /** Sends the batch; a value that cannot cross fails the stream. */
  flush = (): void => {
    this.stopTimer();
    if (this.values.length === 0 || this.failed) return;
    const values = this.values;
    this.values = [];
    let chunks: Uint8Array[];
    try {
      chunks = encodeMessage({ type: "items", id: this.#id, values });
    } catch (error: unknown) {
      this.failed = true;
      this.error = error;
      this.#state.wake?.();
      return;
    }
    let bytes = -FRAME_HEADER_BYTES;
    for (const chunk of chunks) bytes += chunk.byteLength;
    this.#bytesPerItem = bytes / values.length;
    this.#state.inFlightItems += values.length;
    this.#state.inFlightBytes += bytes;
    this.#outbox.write(chunks);
  };

  /** How many more values the batch may take before it must go. */
  room(): number {
    const pending = this.values.length;
    const items = this.windowItems - this.#state.inFlightItems - pending;
    const bytes = this.windowBytes - this.#state.inFlightBytes;
    if (items <= 0 || bytes <= 0) return 0;
    // The first message carries one value, so that the size of values is
    // known before a batch of them can overshoot the window.
    const byBytes = this.#bytesPerItem > 0
      ? Math.max(1, Math.floor(bytes / this.#bytesPerItem)) - pending
      : 1 - pending;
    return Math.min(items, byBytes, MAX_BATCH_ITEMS - pending);
  }

  /** Whether the parent holds a whole window of values or bytes. */
  full(): boolean {
    return this.#state.inFlightItems >= this.windowItems ||
      this.#state.inFlightBytes >= this.windowBytes;
  }

  stopTimer(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** Throws the cancel's reason or the value that could not cross, if any. */
function checkStopped(state: StreamState, batch: Batch): void {
  if (state.cancelled) throw state.controller?.signal.reason;
  if (batch.failed) throw batch.error;
}

/** Waits until the parent's credit opens the window, or a cancel or fault. */
async function awaitCredit(state: StreamState, batch: Batch): Promise<void> {
  while (!state.cancelled && !batch.failed && batch.full()) {
    await new Promise<void>((resolve) => {
      state.wake = resolve;
    });
    state.wake = undefined;
  }
}

/**
 * Sends a streaming handler's values in `items` messages, never more than
 * the call's window ahead of the parent's credit; the caller sends `end`.
 *
 * @returns Settles once every value is written; rejects with the cancel's
 *   reason, the generator's error or what could not be encoded.
 */
export async function pump(
  call: CallMessage,
  state: StreamState,
  iterator: AsyncIterator<unknown> | Iterator<unknown>,
  outbox: Outbox,
): Promise<void> {
  const batch = new Batch(call, state, outbox);
  let finished = false;
  try {
    while (true) {
      if (batch.room() <= 0) {
        batch.flush();
        await awaitCredit(state, batch);
      }
      checkStopped(state, batch);
      const step = await iterator.next();
      checkStopped(state, batch);
      if (step.done) {
        finished = true;
        break;
      }
      batch.values.push(step.value);
      // A slow generator: send what is here once the event loop turns.
      if (batch.values.length === 1) batch.timer = setTimeout(batch.flush, 0);
    }
    batch.flush();
    if (batch.failed) throw batch.error;
  } catch (error: unknown) {
    batch.stopTimer();
    if (!finished && !state.cancelled) batch.flush();
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
}
