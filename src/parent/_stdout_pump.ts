/**
 * Reading a worker's stdout: chunks into frames, frames into messages, until
 * it ends. Private to src/parent.
 *
 * @module
 */

import { FrameReader } from "../protocol/frame_reader.ts";
import { decodeMessage } from "../protocol/messages.ts";
import {
  type ChunkRead,
  type ChunkReader,
  chunkReader,
} from "../runtime/chunk_reader.ts";
import type { Truncation } from "./_exit.ts";
import { readingAnswers } from "./_metrics.ts";

/** A message as decoded from a worker's frame. */
export type DecodedMessage = ReturnType<typeof decodeMessage>;

/** Where what the worker writes goes. */
export interface StdoutSink {
  /**
   * A message, with its frame's payload size.
   *
   * @throws {ProtocolError} when the message breaks the protocol (reading
   *   stops).
   */
  message(message: DecodedMessage, payloadBytes: number): void;
  /** Bytes outside any frame (a stray write to stdout). */
  stray(bytes: Uint8Array): void;
}

/** The reading of one worker's stdout. */
export class StdoutPump {
  #frames: FrameReader;
  #reader: ChunkReader;

  /**
   * Prepares the reading; {@linkcode run} starts it.
   *
   * @param stdout The worker's stdout.
   * @param maxFrameBytes Largest frame accepted.
   * @param sink Where messages go.
   */
  constructor(
    stdout: ReadableStream<Uint8Array>,
    maxFrameBytes: number,
    sink: StdoutSink,
  ) {
    this.#frames = new FrameReader({
      maxFrameBytes,
      onFrame: (frame) => {
        const bytes = frame.head.byteLength + frame.area.byteLength;
        sink.message(decodeMessage(frame), bytes);
      },
      onStray: (bytes) => sink.stray(bytes),
    });
    this.#reader = chunkReader(stdout, this.#frames);
  }

  /**
   * The next chunk of stdout, or `done` once it ended: the chunk reader's
   * own promise (the connection's read loop awaits it directly, so that a
   * stdout failing right after the hello is seen, as before, ahead of the
   * start's check that the worker is alive).
   *
   * @returns The read.
   */
  read(): Promise<ChunkRead> {
    return this.#reader.read();
  }

  /**
   * Hands what a read gave to the frame reader: its frames go to the sink.
   *
   * @param chunk The bytes read.
   * @param inPlace Whether they were read into the frame space.
   * @throws {ProtocolError} when the worker broke the protocol.
   */
  push(chunk: Uint8Array, inPlace: boolean | undefined): void {
    const frames = this.#frames;
    readingAnswers(() =>
      inPlace === true ? frames.filled(chunk) : frames.push(chunk)
    );
  }

  /**
   * Stdout ended.
   *
   * @returns What the last frame lost, if stdout ended inside one.
   */
  end(): Truncation | undefined {
    return this.#frames.end().truncated;
  }

  /** Stops reading (the process is gone, or broke the protocol). */
  cancel(): void {
    this.#reader.cancel().catch(() => {});
  }
}
