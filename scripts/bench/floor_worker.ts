/**
 * The floor: a minimal hand-written echo loop over stdin/stdout, no codec.
 * Each frame is a 4-byte big-endian length and that many bytes; the loop
 * writes every whole frame back as it is. Runs on Deno or Bun, with the same
 * I/O calls airlock's worker side uses (`Deno.stdin.read` and
 * `Deno.stdout.writeSync`; `Bun.stdin.stream()` and `Bun.stdout.writer()`).
 *
 * `deno run floor_worker.ts async` writes with the async `Deno.stdout.write`
 * instead: the plain loop the issue first measured, kept for reference.
 *
 * @module
 */

interface BunSink {
  write(chunk: Uint8Array): number;
  flush(): number | Promise<number>;
}
interface BunLike {
  readonly argv: string[];
  readonly stdin: { stream(): ReadableStream<Uint8Array> };
  readonly stdout: { writer(): BunSink };
}

const bun = (globalThis as { Bun?: BunLike }).Bun;
const mode = (bun ? bun.argv[2] : Deno.args[0]) ?? "sync";

type Write = (frame: Uint8Array) => Promise<void> | void;

function denoWrite(): Write {
  if (mode === "async") {
    return async (frame) => {
      let offset = 0;
      while (offset < frame.byteLength) {
        offset += await Deno.stdout.write(frame.subarray(offset));
      }
    };
  }
  return (frame) => {
    let offset = 0;
    while (offset < frame.byteLength) {
      offset += Deno.stdout.writeSync(frame.subarray(offset));
    }
  };
}

async function* denoChunks(): AsyncGenerator<Uint8Array> {
  const buffer = new Uint8Array(64 * 1024);
  while (true) {
    const read = await Deno.stdin.read(buffer);
    if (read === null) return;
    yield buffer.subarray(0, read);
  }
}

const write: Write = bun
  ? (() => {
    const sink = bun.stdout.writer();
    return async (frame: Uint8Array) => {
      sink.write(frame);
      await sink.flush();
    };
  })()
  : denoWrite();
const chunks: AsyncIterable<Uint8Array> = bun
  ? bun.stdin.stream()
  : denoChunks();

/** Bytes of a partial header or small frame kept between reads. */
let pending = new Uint8Array(0);
/** A large frame being filled. */
let large: Uint8Array | undefined;
let filled = 0;

for await (let chunk of chunks) {
  if (large) {
    const take = Math.min(large.byteLength - filled, chunk.byteLength);
    large.set(chunk.subarray(0, take), filled);
    filled += take;
    if (filled < large.byteLength) continue;
    await write(large);
    large = undefined;
    chunk = chunk.subarray(take);
  }
  let data = chunk;
  if (pending.byteLength > 0) {
    data = new Uint8Array(pending.byteLength + chunk.byteLength);
    data.set(pending, 0);
    data.set(chunk, pending.byteLength);
  }
  let pos = 0;
  while (data.byteLength - pos >= 4) {
    const length = new DataView(data.buffer, data.byteOffset + pos, 4)
      .getUint32(0);
    const end = pos + 4 + length;
    if (end <= data.byteLength) {
      await write(data.subarray(pos, end));
      pos = end;
      continue;
    }
    if (length > 64 * 1024) {
      large = new Uint8Array(4 + length);
      large.set(data.subarray(pos), 0);
      filled = data.byteLength - pos;
      pos = data.byteLength;
    }
    break;
  }
  pending = data.slice(pos);
}
