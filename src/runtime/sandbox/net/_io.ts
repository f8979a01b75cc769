/**
 * The sockets the broker and the forwarder relay between, behind one small
 * pull interface, so that the relay itself (`pump`) is one piece of code:
 * on Deno its own `Deno.listen` / `Deno.connect` (its `node:net` layer cost
 * the relay about 2.7 times the CPU: 480 to 540 ms against 170 to 200 ms
 * per 256 MiB, unix socket to TCP, measured here), on Bun `node:net` (which
 * Bun implements natively). Private to net/.
 *
 * @module
 */

import type * as Net from "node:net";

/** One connected stream socket. */
export interface Stream {
  /** The next bytes (owned by the caller), or `null` at end of stream. */
  read(): Promise<Uint8Array | null>;
  /** Writes all of `bytes`; resolves once the socket took them (backpressure). */
  write(bytes: Uint8Array): Promise<void>;
  /** Ends the writing side (a half-close); the other side may go on. */
  closeWrite(): Promise<void>;
  /** Closes both sides now. Idempotent. */
  close(): void;
}

/** A listening socket. */
export interface Listener {
  /** Stops listening. Idempotent. */
  close(): void;
}

/** What the relay needs of a runtime's sockets. */
export interface NetIo {
  /** Listens on a unix socket at `path`. */
  listenUnix(
    path: string,
    onStream: (stream: Stream) => void,
  ): Promise<Listener>;
  /** Listens on a TCP address. */
  listenTcp(
    host: string,
    port: number,
    onStream: (stream: Stream) => void,
  ): Promise<Listener>;
  /** Connects to a unix socket. */
  connectUnix(path: string): Promise<Stream>;
  /** Connects to a TCP address (no delay), within `timeoutMs`. */
  connectTcp(host: string, port: number, timeoutMs: number): Promise<Stream>;
}

const CHUNK_BYTES = 64 * 1024;

/**
 * How many chunks a `node:net` socket may read ahead of its reader before it
 * is paused (a pause and resume per chunk cost Bun's relay throughput).
 */
const QUEUED_CHUNKS = 8;

/**
 * How many bytes all the `node:net` sockets of this process may hold read
 * ahead of their readers together: past it each pauses after every chunk.
 * Bun hands over chunks of up to about 700 KiB, so eight per stalled
 * connection let a worker that stops reading hold about 5.7 MiB of the
 * parent per connection (690 MiB for 120); one total keeps the read-ahead
 * (the relay's throughput) for ordinary traffic and bounds a flood.
 */
const QUEUED_TOTAL_BYTES = 64 * 1024 * 1024;

/** The bytes queued ahead of their readers, over every socket of this process. */
let queuedTotal = 0;

/**
 * Copies `from` to `to` until `from` ends, then half-closes `to`; counts
 * the bytes. Rejects on an error of either.
 *
 * @param from Where to read.
 * @param to Where to write.
 * @param counted Called with each chunk's size.
 * @returns Once `from` ended and `to` was half-closed.
 */
export async function pump(
  from: Stream,
  to: Stream,
  counted: (bytes: number) => void,
): Promise<void> {
  while (true) {
    const chunk = await from.read();
    if (chunk === null) break;
    counted(chunk.byteLength);
    await to.write(chunk);
  }
  await to.closeWrite();
}

interface DenoConn {
  read(buffer: Uint8Array): Promise<number | null>;
  write(bytes: Uint8Array): Promise<number>;
  closeWrite(): Promise<void>;
  close(): void;
  setNoDelay?(noDelay?: boolean): void;
}

interface DenoNet {
  listen(options: {
    transport?: "tcp" | "unix";
    path?: string;
    hostname?: string;
    port?: number;
  }): AsyncIterable<DenoConn> & { close(): void };
  connect(options: {
    transport?: "tcp" | "unix";
    path?: string;
    hostname?: string;
    port?: number;
  }): Promise<DenoConn>;
}

function denoStream(conn: DenoConn): Stream {
  let closed = false;
  return {
    async read() {
      const buffer = new Uint8Array(CHUNK_BYTES);
      const n = await conn.read(buffer);
      return n === null ? null : buffer.subarray(0, n);
    },
    async write(bytes) {
      let offset = 0;
      while (offset < bytes.byteLength) {
        offset += await conn.write(bytes.subarray(offset));
      }
    },
    async closeWrite() {
      try {
        await conn.closeWrite();
      } catch {
        // Closed already.
      }
    },
    close() {
      if (closed) return;
      closed = true;
      try {
        conn.close();
      } catch {
        // Closed already.
      }
    },
  };
}

function denoListener(
  listener: AsyncIterable<DenoConn> & { close(): void },
  onStream: (stream: Stream) => void,
  setup: (conn: DenoConn) => void = () => {},
): Listener {
  let closed = false;
  (async () => {
    try {
      for await (const conn of listener) {
        setup(conn);
        onStream(denoStream(conn));
      }
    } catch {
      // Closed.
    }
  })();
  return {
    close() {
      if (closed) return;
      closed = true;
      try {
        listener.close();
      } catch {
        // Closed already.
      }
    },
  };
}

function denoIo(deno: DenoNet): NetIo {
  const noDelay = (conn: DenoConn): void => conn.setNoDelay?.(true);
  return {
    listenUnix(path, onStream) {
      try {
        return Promise.resolve(
          denoListener(deno.listen({ transport: "unix", path }), onStream),
        );
      } catch (error: unknown) {
        return Promise.reject(error);
      }
    },
    listenTcp(host, port, onStream) {
      try {
        return Promise.resolve(
          denoListener(
            deno.listen({ hostname: host, port }),
            onStream,
            noDelay,
          ),
        );
      } catch (error: unknown) {
        return Promise.reject(error);
      }
    },
    async connectUnix(path) {
      return denoStream(await deno.connect({ transport: "unix", path }));
    },
    async connectTcp(host, port, timeoutMs) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const connecting = deno.connect({ hostname: host, port });
      try {
        const conn = await Promise.race([
          connecting,
          new Promise<never>((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`no answer within ${timeoutMs} ms`)),
              timeoutMs,
            );
          }),
        ]);
        noDelay(conn);
        return denoStream(conn);
      } catch (error: unknown) {
        connecting.then((conn) => conn.close(), () => {});
        throw error;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

/** A `node:net` socket as a {@linkcode Stream}: paused while nobody reads. */
function nodeStream(socket: Net.Socket): Stream {
  const chunks: Uint8Array[] = [];
  let queued = 0;
  let ended = false;
  let failure: Error | undefined;
  let wake: (() => void) | undefined;
  const notify = (): void => {
    const waiting = wake;
    wake = undefined;
    waiting?.();
  };
  socket.on("data", (chunk: Uint8Array) => {
    chunks.push(chunk);
    queued += chunk.byteLength;
    queuedTotal += chunk.byteLength;
    // Bounded: at most QUEUED_CHUNKS chunks wait for the reader, and one
    // once the process holds QUEUED_TOTAL_BYTES ahead of its readers.
    if (chunks.length >= QUEUED_CHUNKS || queuedTotal >= QUEUED_TOTAL_BYTES) {
      socket.pause();
    }
    notify();
  });
  socket.on("end", () => {
    ended = true;
    notify();
  });
  socket.on("error", (error: Error) => {
    failure = error;
    notify();
  });
  socket.on("close", () => {
    ended = true;
    notify();
  });
  socket.pause();
  return {
    async read() {
      while (true) {
        const chunk = chunks.shift();
        if (chunk !== undefined) {
          queued -= chunk.byteLength;
          queuedTotal -= chunk.byteLength;
          return chunk;
        }
        if (failure !== undefined) throw failure;
        if (ended) return null;
        const waiting = new Promise<void>((resolve) => (wake = resolve));
        socket.resume();
        await waiting;
      }
    },
    write(bytes) {
      if (failure !== undefined) return Promise.reject(failure);
      if (socket.write(bytes)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const done = (): void => {
          socket.off("drain", done);
          socket.off("close", done);
          if (failure !== undefined) reject(failure);
          else resolve();
        };
        socket.once("drain", done);
        socket.once("close", done);
      });
    },
    closeWrite() {
      return new Promise((resolve) => {
        if (socket.destroyed) return resolve();
        socket.end(() => resolve());
      });
    },
    close() {
      socket.destroy();
      // What nobody will read leaves the process's total.
      queuedTotal -= queued;
      queued = 0;
      chunks.length = 0;
    },
  };
}

function nodeIo(net: typeof Net): NetIo {
  return {
    listenUnix(path, onStream) {
      const server = net.createServer(
        { allowHalfOpen: true, pauseOnConnect: true },
        (socket) => onStream(nodeStream(socket)),
      );
      return new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen(path, () => {
          server.off("error", reject);
          resolve({ close: () => server.close() });
        });
      });
    },
    listenTcp(host, port, onStream) {
      const server = net.createServer(
        { allowHalfOpen: true, pauseOnConnect: true },
        (socket) => {
          socket.setNoDelay(true);
          onStream(nodeStream(socket));
        },
      );
      return new Promise((resolve, reject) => {
        server.once("error", reject);
        server.listen({ host, port }, () => {
          server.off("error", reject);
          resolve({ close: () => server.close() });
        });
      });
    },
    connectUnix(path) {
      return new Promise((resolve, reject) => {
        const socket = net.connect({ path, allowHalfOpen: true });
        socket.once("connect", () => {
          socket.off("error", reject);
          resolve(nodeStream(socket));
        });
        socket.once("error", reject);
      });
    },
    connectTcp(host, port, timeoutMs) {
      return new Promise((resolve, reject) => {
        const socket = net.connect({
          host,
          port,
          allowHalfOpen: true,
          noDelay: true,
        });
        const timer = setTimeout(() => {
          socket.destroy();
          reject(new Error(`no answer within ${timeoutMs} ms`));
        }, timeoutMs);
        socket.once("connect", () => {
          clearTimeout(timer);
          socket.off("error", onError);
          resolve(nodeStream(socket));
        });
        const onError = (error: Error): void => {
          clearTimeout(timer);
          socket.destroy();
          reject(error);
        };
        socket.once("error", onError);
      });
    },
  };
}

let io: NetIo | undefined;

/**
 * This runtime's sockets: Deno's own on Deno, `node:net` elsewhere.
 *
 * @returns The implementation, made on first use.
 */
export function netIo(): NetIo {
  if (io !== undefined) return io;
  const global = globalThis as unknown as {
    Deno?: DenoNet;
    Bun?: unknown;
    process: { getBuiltinModule(id: string): unknown };
  };
  io = global.Bun === undefined && global.Deno !== undefined
    ? denoIo(global.Deno)
    : nodeIo(global.process.getBuiltinModule("node:net") as typeof Net);
  return io;
}
