/**
 * What the worker writes to the parent: messages encoded and written to
 * stdout in order, the messages of one turn sharing one write. A value that
 * cannot cross becomes an error answer that always encodes.
 *
 * @module
 */

import type { Message } from "../protocol/messages.ts";
import { encodeMessage } from "../protocol/encode_message.ts";
import type { RuntimeAdapter, WorkerStdio } from "../runtime/types.ts";

/** The worker's stdout (messages) and stderr (notes about them). */
export class Outbox {
  #stdio: WorkerStdio;
  #adapter: RuntimeAdapter;
  /** The last write's promise, and the same never rejecting. */
  #lastWrite: Promise<void> | undefined;
  #lastSent: Promise<void> = Promise.resolve();
  /** stdout is gone: the parent is gone. */
  #writeFailed: () => void;

  constructor(stdio: WorkerStdio, adapter: RuntimeAdapter) {
    this.#stdio = stdio;
    this.#adapter = adapter;
    this.#writeFailed = () => adapter.exit(0);
  }

  /**
   * Encodes and writes a message, after everything sent before. A `result`
   * or `error` whose value cannot be encoded is answered with a TypeError
   * naming why; any other message that cannot be encoded throws.
   *
   * @returns Settles once written; never rejects (a failed write exits).
   */
  send(message: Message): Promise<void> {
    let chunks: Uint8Array[];
    try {
      chunks = encodeMessage(message);
    } catch (error: unknown) {
      if (message.type === "result") {
        // The value cannot cross: answer with the TypeError naming where.
        return this.send({ type: "error", id: message.id, error });
      }
      if (message.type === "error") {
        // The thrown value cannot cross (a getter that throws…): the call
        // still gets an answer, one that always encodes.
        return this.send({
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
    const written = this.#stdio.write(chunks);
    if (written !== this.#lastWrite) {
      this.#lastWrite = written;
      this.#lastSent = written.catch(this.#writeFailed);
    }
    return this.#lastSent;
  }

  /** Writes chunks encoded already (a stream's batch), after everything before. */
  write(chunks: readonly Uint8Array[]): void {
    this.#stdio.write(chunks).catch(this.#writeFailed);
  }

  /** Writes a line to stderr, which the parent hands to its log. */
  warn(text: string): void {
    this.#adapter.writeStderr(`airlock worker: ${text}\n`);
  }
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
