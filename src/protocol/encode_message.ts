/**
 * Encoding the protocol's messages into frames, apart from messages.ts so
 * that it does not load the decoder. A parent
 * encodes its calls from the start and loads the decoding with its first
 * worker's connection (src/parent/_launch.ts), so importing airlock does not
 * load the decoder. Pure: no I/O. See docs/PROTOCOL.md.
 *
 * @module
 */

import { encodeValue } from "./encode_value.ts";
import type { CrossingDirection } from "./_refusal.ts";
import { FRAME_HEADER_BYTES, frameInPlace } from "./frame_header.ts";
import type { Message } from "./messages.ts";

/** Values of a stream in flight (sent, not yet credited) when a call sets no window. */
export const DEFAULT_STREAM_WINDOW_ITEMS = 1024;
/** Payload bytes of a stream in flight when a call sets no window: 4 MiB. */
export const DEFAULT_STREAM_WINDOW_BYTES: number = 4 * 1024 * 1024;

/**
 * Which way each message goes, so that a value that cannot cross is named
 * with the direction it was going (a new message type must be listed).
 */
const DIRECTION: Readonly<Record<Message["type"], CrossingDirection>> = {
  call: "to-worker",
  cancel: "to-worker",
  credit: "to-worker",
  limit: "to-worker",
  ping: "to-worker",
  pid: "to-worker",
  shutdown: "to-worker",
  hello: "to-parent",
  fatal: "to-parent",
  result: "to-parent",
  error: "to-parent",
  items: "to-parent",
  end: "to-parent",
  progress: "to-parent",
  pong: "to-parent",
  dropped: "to-parent",
  "shutdown-ack": "to-parent",
};

/** Options of {@linkcode encodeMessage}. */
export interface EncodeMessageOptions {
  /**
   * Binary values of at least this many bytes travel as attachments after
   * the head instead of inside it.
   *
   * @default {65536}
   */
  attachmentThresholdBytes?: number | undefined;
}

/**
 * Encodes a message into the chunks of one frame.
 *
 * @param message The message.
 * @param options The attachment threshold.
 * @returns The chunks to write, in order: the header and head in one
 * buffer, then the attachments as they are (no copy).
 * @throws {TypeError} when a value in it cannot cross, naming where it sits.
 */
export function encodeMessage(
  message: Message,
  options?: EncodeMessageOptions,
): Uint8Array[] {
  const encoded = encodeValue(message, {
    prefixBytes: FRAME_HEADER_BYTES,
    attachmentThresholdBytes: options?.attachmentThresholdBytes,
    direction: DIRECTION[message.type],
  });
  return frameInPlace(
    encoded.head,
    encoded.attachments,
    encoded.attachmentBytes,
  );
}
