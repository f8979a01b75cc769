/**
 * Fuzz properties of the frame reader and the message decoder, run with a
 * few thousand cases by tests/protocol/frame_test.ts and
 * tests/protocol/messages_test.ts, and with 100,000 and more by
 * scripts/fuzz.ts.
 *
 * Invariants checked on every input:
 * - the frame reader only ever throws `ProtocolError`, and after one it
 *   refuses all further input with the same error;
 * - it never holds more than `FRAME_HEADER_BYTES + maxFrameBytes`, nor more
 *   than it was given (`bufferedBytes`), and never allocates a buffer larger
 *   than `maxFrameBytes` (memory measured around each push);
 * - every frame it emits fits `maxFrameBytes`;
 * - the message decoder only ever throws `ProtocolError` (without a cause:
 *   a cause means an unexpected internal failure), and what it returns is a
 *   well-formed message;
 * - the value decoder, given heads of nested repetitions of amplifiers (few
 *   bytes, much memory) and a memory budget, returns or throws a cause-less
 *   `ProtocolError`, and the buffers it copies stay within the budget.
 *
 * @module
 */

import fc from "fast-check";
import { readFileSync } from "node:fs";
import process from "node:process";
import { ProtocolError } from "../../src/errors.ts";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import { encodeValue } from "../../src/protocol/encode_value.ts";
import {
  FrameReader,
  type FrameReaderEnd,
} from "../../src/protocol/frame_reader.ts";
import {
  type Frame,
  FRAME_HEADER_BYTES,
  FRAME_MAGIC,
} from "../../src/protocol/frame_header.ts";
import {
  decodeMessage,
  type Message,
  MESSAGE_VERSION,
  OLDEST_MESSAGE_VERSION,
} from "../../src/protocol/messages.ts";
import {
  amplifierArb,
  concat,
  frameBytes,
  hostileHeaderArb,
  messageArb,
  mutate,
  mutationArb,
  noiseArb,
  split,
  valueArb,
} from "./_arbitraries.ts";

const IS_BUN = typeof (globalThis as { Bun?: unknown }).Bun === "object";

/**
 * Measures memory that a large allocation would show: on Deno the bytes of
 * array buffers (exact); on Bun the virtual size (Bun reserves a cage for
 * typed arrays up front, so only multi-GiB allocations show there).
 *
 * @returns Bytes.
 */
export function allocatedBytes(): number {
  if (!IS_BUN) {
    const usage = process.memoryUsage();
    return usage.external + usage.arrayBuffers;
  }
  const status = readFileSync("/proc/self/status", "utf8");
  return Number(/^VmSize:\s+(\d+)/m.exec(status)?.[1] ?? 0) * 1024;
}

/**
 * The most an allocation may grow `allocatedBytes()` by while a reader with
 * this cap takes one chunk.
 *
 * @param maxFrameBytes The reader's cap.
 * @returns Bytes.
 */
export function allocationLimit(maxFrameBytes: number): number {
  return maxFrameBytes + (IS_BUN ? 1024 ** 3 : 4 * 1024 * 1024);
}

/** What a reader made of a stream. */
export interface StreamOutcome {
  /** The frames, in order. */
  frames: Frame[];
  /** Stray bytes, joined. */
  stray: Uint8Array;
  /** The protocol error, if one ended the stream. */
  error: ProtocolError | undefined;
  /** What `end()` reported (when no error). */
  end: FrameReaderEnd | undefined;
}

function fail(message: string): never {
  throw new Error(`Invariant broken: ${message}`);
}

/**
 * Feeds pieces to a reader, checking its invariants after each.
 *
 * @param pieces The stream, cut.
 * @param maxFrameBytes The reader's cap.
 * @param measure Whether to measure allocations around each push.
 * @returns What came out.
 */
export function readStream(
  pieces: readonly Uint8Array[],
  maxFrameBytes: number,
  measure = false,
): StreamOutcome {
  const frames: Frame[] = [];
  const stray: Uint8Array[] = [];
  const reader = new FrameReader({
    maxFrameBytes,
    onFrame: (frame) => {
      const size = frame.head.byteLength + frame.area.byteLength;
      if (size > maxFrameBytes) fail(`a frame of ${size} bytes was emitted`);
      frames.push(frame);
    },
    onStray: (bytes) => stray.push(bytes.slice()),
  });
  let pushed = 0;
  let error: ProtocolError | undefined;
  for (const piece of pieces) {
    const before = measure ? allocatedBytes() : 0;
    try {
      reader.push(piece);
    } catch (thrown: unknown) {
      if (!(thrown instanceof ProtocolError)) throw thrown;
      error = thrown;
    }
    if (measure) {
      const grown = allocatedBytes() - before;
      if (grown > allocationLimit(maxFrameBytes)) {
        fail(`a push of ${piece.byteLength} bytes allocated ${grown} bytes`);
      }
    }
    if (error) break;
    pushed += piece.byteLength;
    const held = reader.bufferedBytes;
    if (held > pushed) fail(`holds ${held} bytes of ${pushed} given`);
    if (held > FRAME_HEADER_BYTES + maxFrameBytes) {
      fail(`holds ${held} bytes with maxFrameBytes ${maxFrameBytes}`);
    }
  }
  if (error) {
    try {
      reader.push(new Uint8Array([1]));
      fail("a failed reader took more input");
    } catch (again: unknown) {
      if (again !== error) fail("a failed reader threw another error");
    }
    return { frames, stray: concat(stray), error, end: undefined };
  }
  const end = reader.end();
  return { frames, stray: concat(stray), error: undefined, end };
}

const TYPES = new Set([
  "hello",
  "fatal",
  "call",
  "result",
  "error",
  "cancel",
  "items",
  "end",
  "credit",
  "progress",
  "shutdown",
  "shutdown-ack",
]);

/**
 * Checks that a decoded message is well formed.
 *
 * @param message What `decodeMessage` returned.
 */
export function checkMessage(message: Message): void {
  if (!TYPES.has(message.type)) fail(`type ${message.type}`);
  const id = message.id as unknown;
  if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 0) {
    fail(`id ${String(id)}`);
  }
  switch (message.type) {
    case "call":
      if (id === 0) fail("call with id 0");
      if (typeof message.op !== "string") fail("call op");
      if (!Array.isArray(message.args)) fail("call args");
      break;
    case "result":
    case "error":
    case "cancel":
    case "end":
    case "progress":
      if (id === 0) fail(`${message.type} with id 0`);
      break;
    case "items":
      if (id === 0) fail("items with id 0");
      if (!Array.isArray(message.values) || message.values.length === 0) {
        fail("items values");
      }
      break;
    case "credit":
      if (id === 0) fail("credit with id 0");
      for (const count of [message.items, message.bytes]) {
        if (!Number.isSafeInteger(count) || count < 0) fail("credit count");
      }
      break;
    case "hello":
      if (id !== 0) fail("hello id");
      if (
        !Number.isSafeInteger(message.version) ||
        message.version < OLDEST_MESSAGE_VERSION ||
        message.version > MESSAGE_VERSION
      ) {
        fail("hello version");
      }
      if (!Number.isSafeInteger(message.pid) || message.pid < 0) {
        fail("hello pid");
      }
      if (!message.ops.every((op) => typeof op === "string")) fail("ops");
      if (!message.idempotent.every((op) => typeof op === "string")) {
        fail("idempotent");
      }
      if (!Number.isSafeInteger(message.concurrency)) fail("concurrency");
      if (message.concurrency < 1) fail("concurrency < 1");
      if (typeof message.runtime !== "string") fail("runtime");
      break;
    case "fatal":
      if (id !== 0) fail("fatal id");
      if (!(message.error instanceof Error)) fail("fatal error");
      if (message.phase !== "import" && message.phase !== "definition") {
        fail("fatal phase");
      }
      break;
    default:
      if (id !== 0) fail(`${message.type} id`);
  }
}

/**
 * Decodes a frame; a failure must be a cause-less `ProtocolError`.
 *
 * @param frame The frame.
 * @returns The message, or the error.
 */
export function decodeChecked(frame: Frame): Message | ProtocolError {
  let message: Message;
  try {
    message = decodeMessage(frame);
  } catch (error: unknown) {
    if (!(error instanceof ProtocolError)) throw error;
    if (error.cause !== undefined) {
      fail(`decoder failed unexpectedly: ${String(error.cause)}`);
    }
    return error;
  }
  checkMessage(message);
  return message;
}

const thresholdArb = fc.oneof(
  fc.constant(undefined),
  fc.nat({ max: 16 }),
);

const segmentArb: fc.Arbitrary<Uint8Array> = fc.oneof(
  {
    weight: 3,
    arbitrary: fc.tuple(messageArb, thresholdArb).map(([m, t]) =>
      frameBytes(m, t)
    ),
  },
  { weight: 2, arbitrary: noiseArb },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }) },
  { weight: 1, arbitrary: fc.constant(FRAME_MAGIC) },
  { weight: 1, arbitrary: hostileHeaderArb },
);

const cutsArb = fc.array(fc.nat(), { maxLength: 12 });

const maxArb = fc.oneof(
  fc.constant(256 * 1024 * 1024),
  fc.constantFrom(1024, 4096, 65536, 70000),
  fc.integer({ min: 0, max: 2048 }),
);

/** One fuzz target: a name and a property to run. */
export interface FuzzTarget {
  /** What it fuzzes. */
  name: string;
  /** Share of the total case count. */
  weight: number;
  /** The property. */
  property: fc.IPropertyWithHooks<unknown[]> | fc.IProperty<unknown[]>;
}

function framesThroughDecoder(outcome: StreamOutcome): void {
  for (const frame of outcome.frames) decodeChecked(frame);
}

/**
 * The fuzz targets.
 *
 * @returns The targets.
 */
export function fuzzTargets(): FuzzTarget[] {
  return [
    {
      name: "frame reader: random byte streams with magics, headers and frames",
      weight: 3,
      property: fc.property(
        fc.array(segmentArb, { maxLength: 8 }),
        cutsArb,
        maxArb,
        (segments, cuts, max) => {
          const outcome = readStream(split(concat(segments), cuts), max);
          framesThroughDecoder(outcome);
        },
      ) as fc.IProperty<unknown[]>,
    },
    {
      name: "frame reader: mutated frame streams",
      weight: 3,
      property: fc.property(
        fc.array(segmentArb, { minLength: 1, maxLength: 5 }),
        fc.array(mutationArb, { minLength: 1, maxLength: 4 }),
        cutsArb,
        maxArb,
        (segments, mutations, cuts, max) => {
          const stream = mutate(concat(segments), mutations);
          framesThroughDecoder(readStream(split(stream, cuts), max));
        },
      ) as fc.IProperty<unknown[]>,
    },
    {
      name:
        "frame reader: hostile headers (lengths up to 0xFFFFFFFF), memory measured",
      weight: 1,
      property: fc.property(
        hostileHeaderArb,
        fc.uint8Array({ maxLength: 64 }),
        cutsArb,
        fc.constantFrom(1024, 1024 * 1024),
        (head, tail, cuts, max) => {
          readStream(split(concat([head, tail]), cuts), max, true);
        },
      ) as fc.IProperty<unknown[]>,
    },
    {
      name:
        "value decoder: nested amplifiers under a small budget, memory measured",
      weight: 1,
      property: fc.property(
        amplifierArb,
        fc.oneof(fc.nat({ max: 64 * 1024 }), fc.constant(1024 * 1024)),
        ({ head, area }, maxBuildBytes) => {
          const before = allocatedBytes();
          try {
            decodeValue(head, area, { maxBuildBytes });
          } catch (error: unknown) {
            if (!(error instanceof ProtocolError)) throw error;
            if (error.cause !== undefined) {
              fail(`decoder failed unexpectedly: ${String(error.cause)}`);
            }
          }
          const grown = allocatedBytes() - before;
          if (grown > allocationLimit(maxBuildBytes)) {
            fail(`a budget of ${maxBuildBytes} bytes allocated ${grown}`);
          }
        },
      ) as fc.IProperty<unknown[]>,
    },
    {
      name: "message decoder: random heads and attachment areas",
      weight: 2,
      property: fc.property(
        fc.uint8Array({ maxLength: 64 }),
        fc.uint8Array({ maxLength: 16 }),
        (head, area) => {
          decodeChecked({ head, area });
        },
      ) as fc.IProperty<unknown[]>,
    },
    {
      name: "message decoder: mutated messages",
      weight: 3,
      property: fc.property(
        messageArb,
        fc.array(mutationArb, { minLength: 1, maxLength: 4 }),
        fc.nat({ max: 16 }),
        fc.boolean(),
        (message, mutations, threshold, mutateArea) => {
          const encoded = encodeValue(message, {
            attachmentThresholdBytes: threshold,
          });
          const area = concat(encoded.attachments);
          decodeChecked(
            mutateArea
              ? { head: encoded.head, area: mutate(area, mutations) }
              : { head: mutate(encoded.head, mutations), area },
          );
        },
      ) as fc.IProperty<unknown[]>,
    },
    {
      name: "message decoder: well-formed values that may not be messages",
      weight: 2,
      property: fc.property(
        fc.record({
          type: fc.oneof(
            fc.constantFrom(...TYPES),
            fc.string({ maxLength: 8 }),
            valueArb,
          ),
          id: fc.oneof(
            fc.constantFrom(0, 1, -1, 1.5, NaN, 2 ** 53, 2n, "1", null),
            fc.nat(),
            valueArb,
          ),
          op: fc.oneof(fc.string({ maxLength: 6 }), valueArb),
          args: fc.oneof(fc.array(valueArb, { maxLength: 3 }), valueArb),
          version: fc.oneof(fc.constant(1), valueArb),
          pid: fc.oneof(fc.nat(), valueArb),
          ops: fc.oneof(fc.array(fc.string({ maxLength: 4 })), valueArb),
          concurrency: fc.oneof(fc.integer({ min: -2, max: 20 }), valueArb),
          idempotent: fc.oneof(fc.array(fc.string({ maxLength: 4 })), valueArb),
          phase: fc.oneof(fc.constantFrom("import", "definition"), valueArb),
          error: valueArb,
        }, { requiredKeys: ["type"] }),
        (record) => {
          const encoded = encodeValue(record);
          decodeChecked({
            head: encoded.head,
            area: concat(encoded.attachments),
          });
        },
      ) as fc.IProperty<unknown[]>,
    },
  ];
}
