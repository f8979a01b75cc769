/**
 * A worker's start handshake: its hello (or the fatal report it sends
 * instead), the start deadline, and the start error when it ends before
 * the hello. Private to src/parent.
 *
 * @module
 */

import { ProtocolError, WorkerTimeoutError } from "../errors.ts";
import type { HelloMessage } from "../protocol/messages.ts";
import type { ConnectionExit, StartFatal, Truncation } from "./_exit.ts";
import type { HintContext } from "./_hints.ts";
import { startError } from "./_start_error.ts";
import type { DecodedMessage } from "./_stdout_pump.ts";

/** Options of {@linkcode Handshake}. */
export interface HandshakeOptions {
  /** The worker module (or command), for errors. */
  module: string;
  /** The pid airlock spawned. */
  spawnPid: number;
  /** Deadline for the hello, in ms; 0 for none. */
  startTimeoutMs: number;
  /** When the start began (a transport's connect counts), ms since the epoch. */
  began: number;
  /** When the process was spawned, ms since the epoch. */
  spawnedAt: number;
}

/** One worker's start handshake. */
export class Handshake {
  /** Settles with the hello once the connection is ready; rejects with a start error. */
  readonly ready: Promise<HelloMessage>;
  #options: HandshakeOptions;
  #resolve!: (hello: HelloMessage) => void;
  #reject!: (error: Error) => void;
  #hello: HelloMessage | undefined;
  #fatal: StartFatal | undefined;
  /** Whether the worker ended before its hello. */
  #ended = false;

  /**
   * Starts waiting for the hello, and arms the start deadline.
   *
   * @param options Who starts, and the deadline.
   * @param expired Called when the deadline passes without a hello (the
   *   start has failed by then; it kills the worker).
   */
  constructor(options: HandshakeOptions, expired: () => void) {
    this.#options = options;
    this.ready = new Promise<HelloMessage>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    this.ready.catch(() => {});
    if (options.startTimeoutMs > 0) this.#deadline(expired);
  }

  /**
   * A message before the hello: the hello, or the worker's fatal report.
   *
   * @param message The message.
   * @returns The hello, when it is one.
   * @throws {ProtocolError} for any other message.
   */
  receive(message: DecodedMessage): HelloMessage | undefined {
    if (message.type === "hello") {
      this.#hello = message;
      return message;
    }
    if (message.type === "fatal") {
      this.#fatal = { phase: message.phase, error: message.error };
      return undefined;
    }
    throw new ProtocolError(
      `Cannot read message: expected "hello" first, received "${message.type}"`,
    );
  }

  /** The connection is set up after the hello: `ready` resolves. */
  done(): void {
    if (this.#hello) this.#resolve(this.#hello);
  }

  /**
   * The worker ended before its hello: `ready` rejects with the start error.
   *
   * @param exit How it ended.
   * @param truncated A frame cut short, if any.
   * @param hints The worker's grants, for the hint of a denied access.
   */
  failed(
    exit: ConnectionExit,
    truncated: Truncation | undefined,
    hints: HintContext | undefined,
  ): void {
    this.#ended = true;
    const { module, spawnPid } = this.#options;
    this.#reject(
      startError(module, spawnPid, exit, this.#fatal, truncated, hints),
    );
  }

  #deadline(expired: () => void): void {
    const { module, spawnPid, startTimeoutMs, began, spawnedAt } =
      this.#options;
    const timer = setTimeout(() => {
      if (this.#hello || this.#ended) return;
      this.#reject(
        new WorkerTimeoutError({
          module,
          pid: spawnPid,
          timeoutMs: startTimeoutMs,
          elapsedMs: Date.now() - began,
          phase: "start",
        }),
      );
      expired();
    }, Math.max(0, startTimeoutMs - (spawnedAt - began)));
    const clear = () => clearTimeout(timer);
    this.ready.then(clear, clear);
  }
}
