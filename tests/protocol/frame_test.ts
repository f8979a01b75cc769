import { describe, test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { ProtocolError } from "../../src/errors.ts";
import { FrameReader } from "../../src/protocol/frame_reader.ts";
import {
  DEFAULT_MAX_FRAME_BYTES,
  type Frame,
  FRAME_HEADER_BYTES,
  FRAME_MAGIC,
  MAX_FRAME_BYTES_LIMIT,
  writeFrameHeader,
} from "../../src/protocol/frame_header.ts";
import { decodeMessage, type Message } from "../../src/protocol/messages.ts";
import { encodeMessage } from "../../src/protocol/encode_message.ts";
import {
  type ChunkReader,
  chunkReader,
} from "../../src/runtime/chunk_reader.ts";
import {
  concat,
  defuse,
  difference,
  frameBytes,
  header,
  messageArb,
  noiseArb,
  split,
  valueArb,
} from "./_arbitraries.ts";
import {
  allocatedBytes,
  allocationLimit,
  fuzzTargets,
  readStream,
} from "./_fuzz.ts";

function assertSame(actual: unknown, expected: unknown): void {
  const d = difference(actual, expected);
  if (d !== undefined) assert.fail(d);
}

function decodeAll(frames: readonly Frame[]): Message[] {
  return frames.map((frame) => decodeMessage(frame));
}

const thresholdArb = fc.oneof(fc.constant(undefined), fc.nat({ max: 16 }));
const cutsArb = fc.array(fc.nat(), { maxLength: 16 });

describe("FrameReader round trips", () => {
  test("FrameReader gives back every supported value exactly when the stream is split at random points", () => {
    fc.assert(
      fc.property(
        fc.array(valueArb, { minLength: 1, maxLength: 4 }),
        thresholdArb,
        cutsArb,
        (values, threshold, cuts) => {
          const messages: Message[] = values.map((value, i) => ({
            type: "result",
            id: i + 1,
            value,
          }));
          const stream = concat(messages.map((m) => frameBytes(m, threshold)));
          const outcome = readStream(
            split(stream, cuts),
            DEFAULT_MAX_FRAME_BYTES,
          );
          assert.equal(outcome.error, undefined);
          assert.deepEqual(outcome.end, {});
          assert.equal(outcome.stray.byteLength, 0);
          assertSame(decodeAll(outcome.frames), messages);
        },
      ),
      { numRuns: 300 },
    );
  });

  test("FrameReader gives back every message type exactly, attachments included", () => {
    fc.assert(
      fc.property(
        fc.array(messageArb, { minLength: 1, maxLength: 4 }),
        thresholdArb,
        cutsArb,
        (messages, threshold, cuts) => {
          const stream = concat(messages.map((m) => frameBytes(m, threshold)));
          const outcome = readStream(
            split(stream, cuts),
            DEFAULT_MAX_FRAME_BYTES,
          );
          assert.equal(outcome.error, undefined);
          assertSame(decodeAll(outcome.frames), messages);
        },
      ),
      { numRuns: 200 },
    );
  });

  test("FrameReader assembles frames over 64 KiB from random pieces, holding no more than the frame", () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 64 * 1024 - 64, max: 400 * 1024 }),
        fc.array(fc.nat(), { maxLength: 40 }),
        fc.boolean(),
        (size, cuts, attach) => {
          const bytes = new Uint8Array(size);
          for (let i = 0; i < size; i += 97) bytes[i] = i & 0xff;
          const messages: Message[] = [
            { type: "result", id: 1, value: { bytes, tail: "after" } },
            { type: "cancel", id: 2 },
          ];
          const stream = concat(
            messages.map((m) => frameBytes(m, attach ? 0 : 1 << 30)),
          );
          const outcome = readStream(
            split(stream, cuts.map((cut) => cut % stream.byteLength)),
            DEFAULT_MAX_FRAME_BYTES,
          );
          assert.equal(outcome.error, undefined);
          assertSame(decodeAll(outcome.frames), messages);
        },
      ),
      { numRuns: 25 },
    );
  });

  test("FrameReader assembles a frame fed one byte at a time, holding only the bytes that arrived", () => {
    // Each byte is copied once into the frame's own buffer (0.1 joined what
    // it held with every new chunk: a 64 KiB frame trickled a byte at a time
    // cost 1 s of CPU on Deno).
    for (const size of [0, 1, 15, 100, 70_000]) {
      const bytes = new Uint8Array(size).map((_, i) => i & 0xff);
      const message: Message = { type: "result", id: 1, value: bytes };
      const stream = frameBytes(message, 1 << 30);
      const frames: Frame[] = [];
      const reader = new FrameReader({
        onFrame: (frame) => frames.push(frame),
        onStray: () => assert.fail("stray output"),
      });
      for (let i = 0; i < stream.byteLength; i++) {
        reader.push(stream.subarray(i, i + 1));
        if (frames.length === 0) {
          const held = reader.bufferedBytes;
          assert.ok(held <= i + 1 && held >= i + 1 - FRAME_HEADER_BYTES);
        }
      }
      assert.equal(frames.length, 1);
      assertSame(decodeAll(frames), [message]);
      assert.deepEqual(reader.end(), {});
    }
  });

  test("FrameReader recovers every whole frame around stray output, and hands on every stray byte in order", () => {
    fc.assert(
      fc.property(
        fc.array(
          fc.oneof(
            messageArb.map((message) => ({ message })),
            noiseArb.map((noise) => ({ noise })),
          ),
          { maxLength: 8 },
        ),
        cutsArb,
        (generated, cuts) => {
          // Noise next to noise could join into a magic: merge and defuse it.
          const segments: ({ message: Message } | { noise: Uint8Array })[] = [];
          for (const segment of generated) {
            const last = segments.at(-1);
            if ("noise" in segment && last && "noise" in last) {
              last.noise = defuse(concat([last.noise, segment.noise]));
            } else {
              segments.push(segment);
            }
          }
          const stream = concat(
            segments.map((s) =>
              "message" in s ? frameBytes(s.message) : s.noise
            ),
          );
          const outcome = readStream(
            split(stream, cuts),
            DEFAULT_MAX_FRAME_BYTES,
          );
          assert.equal(outcome.error, undefined);
          assert.deepEqual(outcome.end, {});
          const messages = segments.flatMap((s) =>
            "message" in s ? [s.message] : []
          );
          assertSame(decodeAll(outcome.frames), messages);
          const noise = concat(
            segments.flatMap((s) => "noise" in s ? [s.noise] : []),
          );
          assert.deepEqual(outcome.stray, noise);
        },
      ),
      { numRuns: 300 },
    );
  });
});

/** A frame of `payload` bytes (head only) whose byte i is i mod 251. */
function patternFrame(payload: number): Uint8Array {
  const frame = new Uint8Array(FRAME_HEADER_BYTES + payload);
  writeFrameHeader(frame, payload, 0);
  for (let i = 0; i < payload; i++) {
    frame[FRAME_HEADER_BYTES + i] = i % 251;
  }
  return frame;
}

/** A byte stream handing out `bytes` at most `piece` at a time, then closing. */
function byteStream(
  bytes: Uint8Array,
  piece: number,
): ReadableStream<Uint8Array> {
  let at = 0;
  return new ReadableStream({
    type: "bytes",
    pull(controller: ReadableByteStreamController) {
      const request = controller.byobRequest;
      const room = request?.view?.byteLength ?? piece;
      const n = Math.min(piece, room, bytes.byteLength - at);
      if (request?.view) {
        new Uint8Array(
          request.view.buffer,
          request.view.byteOffset,
          request.view.byteLength,
        ).set(bytes.subarray(at, at + n));
        request.respond(n);
      } else {
        controller.enqueue(bytes.slice(at, at + n));
      }
      at += n;
      if (at === bytes.byteLength) controller.close();
    },
  });
}

/** Reads `chunks` to the end into `reader`, in place where they were read so. */
async function feed(chunks: ChunkReader, reader: FrameReader): Promise<void> {
  for (let read = await chunks.read(); !read.done; read = await chunks.read()) {
    if (read.inPlace) reader.filled(read.value!);
    else reader.push(read.value!);
  }
}

describe("FrameReader reading in place", () => {
  test("FrameReader.filled() refuses bytes that are not in the frame's space, and then any input", () => {
    const whole = patternFrame(1000);
    const cases: ((reader: FrameReader) => Uint8Array)[] = [
      // No frame is partly read.
      () => new Uint8Array(10),
      // A chunk of its own, not the space.
      () => whole.slice(116, 200),
      // The space, but past the bytes filled.
      (reader) => reader.space()!.subarray(10, 20),
      // More than the space (a view on a buffer of another size).
      () => new Uint8Array(new ArrayBuffer(2000), 100, 901),
    ];
    for (const [index, view] of cases.entries()) {
      const reader = new FrameReader({ onFrame: () => {}, onStray: () => {} });
      if (index > 0) reader.push(whole.subarray(0, 116));
      assert.throws(
        () => reader.filled(view(reader)),
        (error: unknown) =>
          error instanceof ProtocolError &&
          /not in the frame's space/.test(error.message),
        `case ${index}`,
      );
      assert.throws(() => reader.push(whole.slice(116)), ProtocolError);
    }
  });

  test("chunkReader with the frame reader reads the rest of a large frame straight into the frame's buffer, bytes intact", async () => {
    const payload = 300_000;
    const stream = concat([patternFrame(payload), patternFrame(10)]);
    const frames: Frame[] = [];
    const reader = new FrameReader({
      onFrame: (frame) => frames.push(frame),
      onStray: () => assert.fail("no stray bytes"),
    });
    let lent = 0;
    const chunks = chunkReader(byteStream(stream, 7000), {
      space() {
        const space = reader.space();
        if (space !== undefined) lent++;
        return space;
      },
    });
    await feed(chunks, reader);
    assert.deepEqual(reader.end(), {});
    assert.equal(frames.length, 2);
    const head = frames[0]!.head;
    assert.equal(head.byteLength, payload);
    // The frame's own buffer, filled by the reads: one per 7,000 bytes.
    assert.equal(head.buffer.byteLength, payload);
    assert.ok(lent >= Math.floor(payload / 7000) - 1, `${lent} reads in place`);
    for (let i = 0; i < payload; i++) {
      if (head[i] !== i % 251) assert.fail(`byte ${i} is ${head[i]}`);
    }
    assert.deepEqual([...frames[1]!.head], [...patternFrame(10).subarray(16)]);
  });

  test("a frame cut short after reads in place is reported with its real length", async () => {
    const whole = patternFrame(100_000);
    const frames: Frame[] = [];
    const reader = new FrameReader({
      onFrame: (frame) => frames.push(frame),
      onStray: () => assert.fail("no stray bytes"),
    });
    const chunks = chunkReader(
      byteStream(whole.subarray(0, 50_016), 4096),
      reader,
    );
    await feed(chunks, reader);
    assert.equal(frames.length, 0);
    assert.deepEqual(reader.end(), {
      truncated: { expectedBytes: 100_000, receivedBytes: 50_000 },
    });
  });

  test("a space left unused still takes copied chunks; a space taken away and not given back is a ProtocolError", () => {
    const whole = patternFrame(1000);
    const frames: Frame[] = [];
    const reader = new FrameReader({
      onFrame: (frame) => frames.push(frame),
      onStray: () => assert.fail("no stray bytes"),
    });
    reader.push(whole.subarray(0, 116));
    assert.equal(reader.space()?.byteLength, 900);
    reader.push(whole.slice(116, 516));
    assert.equal(reader.space()?.byteLength, 500);
    reader.push(whole.slice(516));
    assert.equal(frames.length, 1);
    assert.deepEqual([...frames[0]!.head], [...whole.subarray(16)]);

    const other = new FrameReader({ onFrame: () => {}, onStray: () => {} });
    other.push(whole.subarray(0, 116));
    const space = other.space()!;
    const taken = space.buffer as ArrayBuffer;
    structuredClone(taken, { transfer: [taken] });
    assert.throws(
      () => other.push(whole.slice(116, 200)),
      (error: unknown) =>
        error instanceof ProtocolError &&
        /did not give it back/.test(error.message),
    );
  });
});

describe("FrameReader on hostile input", () => {
  test("FrameReader rejects a length of 0xFFFFFFFF before it allocates anything", () => {
    for (const max of [DEFAULT_MAX_FRAME_BYTES, 1024]) {
      const claim = header({
        version: 1,
        reserved: 0,
        payload: 0xffffffff,
        head: 0,
      });
      const before = allocatedBytes();
      const outcome = readStream([claim, new Uint8Array(64)], max, true);
      assert.ok(outcome.error instanceof ProtocolError);
      assert.match(
        outcome.error.message,
        /length 4294967295 exceeds maxFrameBytes/,
      );
      assert.ok(allocatedBytes() - before < allocationLimit(max));
    }
  });

  test("FrameReader rejects a claimed length above maxFrameBytes even when it arrives one byte at a time", () => {
    const claim = header({ version: 1, reserved: 0, payload: 4097, head: 1 });
    const reader = new FrameReader({
      maxFrameBytes: 4096,
      onFrame: () => assert.fail("no frame"),
      onStray: () => assert.fail("no stray bytes"),
    });
    for (let i = 0; i < FRAME_HEADER_BYTES - 1; i++) {
      reader.push(claim.subarray(i, i + 1));
      assert.equal(reader.bufferedBytes, i + 1);
    }
    assert.throws(
      () => reader.push(claim.subarray(FRAME_HEADER_BYTES - 1)),
      (error: unknown) =>
        error instanceof ProtocolError &&
        /length 4097 exceeds maxFrameBytes 4096/.test(error.message),
    );
    assert.equal(reader.bufferedBytes, 0);
  });

  test("FrameReader rejects a bad version, reserved bytes or head length, and refuses input after", () => {
    const cases: [Parameters<typeof header>[0], RegExp][] = [
      [{ version: 2, reserved: 0, payload: 1, head: 1 }, /protocol version 2/],
      [{ version: 0, reserved: 0, payload: 1, head: 1 }, /protocol version 0/],
      [{ version: 1, reserved: 1, payload: 1, head: 1 }, /reserved/],
      [{ version: 1, reserved: 0x10000, payload: 1, head: 1 }, /reserved/],
      [{ version: 1, reserved: 0, payload: 4, head: 5 }, /head length 5/],
    ];
    for (const [fields, pattern] of cases) {
      const outcome = readStream(
        [header(fields), new Uint8Array(8)],
        DEFAULT_MAX_FRAME_BYTES,
      );
      assert.ok(outcome.error instanceof ProtocolError, JSON.stringify(fields));
      assert.match(outcome.error.message, pattern);
      assert.equal(outcome.frames.length, 0);
    }
  });

  test("FrameReader reports a frame cut short by end-of-file, after every whole frame before it", () => {
    fc.assert(
      fc.property(
        fc.array(messageArb, { maxLength: 3 }),
        messageArb,
        fc.nat(),
        cutsArb,
        (whole, last, at, cuts) => {
          const cutFrame = frameBytes(last);
          const keep = 4 + (at % (cutFrame.byteLength - 4));
          const stream = concat([
            ...whole.map((m) => frameBytes(m)),
            cutFrame.subarray(0, keep),
          ]);
          const outcome = readStream(
            split(stream, cuts),
            DEFAULT_MAX_FRAME_BYTES,
          );
          assert.equal(outcome.error, undefined);
          assertSame(decodeAll(outcome.frames), whole);
          const truncated = outcome.end?.truncated;
          assert.ok(truncated, "truncation reported");
          if (keep >= FRAME_HEADER_BYTES) {
            assert.equal(truncated.expectedBytes, cutFrame.byteLength - 16);
            assert.equal(truncated.receivedBytes, keep - 16);
          } else {
            assert.equal(truncated.expectedBytes, FRAME_HEADER_BYTES);
            assert.equal(truncated.receivedBytes, keep);
          }
          assert.equal(outcome.stray.byteLength, 0);
        },
      ),
      { numRuns: 200 },
    );
  });

  test("FrameReader treats a partial magic at end-of-file as stray output", () => {
    for (const size of [1, 2, 3]) {
      const outcome = readStream(
        [FRAME_MAGIC.subarray(0, size)],
        DEFAULT_MAX_FRAME_BYTES,
      );
      assert.deepEqual(outcome.end, {});
      assert.deepEqual(outcome.stray, FRAME_MAGIC.slice(0, size));
    }
  });

  test("FrameReader emits an empty frame, which decodeMessage rejects", () => {
    const outcome = readStream(
      [header({ version: 1, reserved: 0, payload: 0, head: 0 })],
      DEFAULT_MAX_FRAME_BYTES,
    );
    assert.equal(outcome.frames.length, 1);
    assert.throws(
      () => decodeMessage(outcome.frames[0]!),
      ProtocolError,
    );
  });

  test("writeFrameHeader() refuses a payload the header cannot express", () => {
    assert.throws(
      () => writeFrameHeader(new Uint8Array(16), MAX_FRAME_BYTES_LIMIT, 1),
      RangeError,
    );
    const target = new Uint8Array(16);
    writeFrameHeader(target, 3, MAX_FRAME_BYTES_LIMIT - 3);
    assert.deepEqual(
      target,
      header({ version: 1, reserved: 0, payload: 0xffffffff, head: 3 }),
    );
  });

  test("encodeMessage() frames carry the magic, version 1 and exact lengths", () => {
    const chunks = encodeMessage({ type: "cancel", id: 7 });
    const bytes = concat(chunks);
    assert.deepEqual(
      bytes.subarray(0, 8),
      new Uint8Array([0x89, 0x41, 0x4c, 0x4b, 1, 0, 0, 0]),
    );
    const view = new DataView(bytes.buffer, bytes.byteOffset);
    assert.equal(view.getUint32(8), bytes.byteLength - 16);
    assert.equal(view.getUint32(12), bytes.byteLength - 16);
  });
});

describe("frame reader fuzz (CI size; deno task fuzz runs 100,000 cases)", () => {
  for (const target of fuzzTargets()) {
    if (!target.name.startsWith("frame reader")) continue;
    test(`fuzz: ${target.name}`, () => {
      fc.assert(target.property, { numRuns: 400 * target.weight });
    });
  }
});
