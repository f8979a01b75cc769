/**
 * The sockets the broker and the forwarder relay between, behind one small
 * pull interface, so that the relay itself (`pump`) is one piece of code:
 * on Deno its own `Deno.listen` / `Deno.connect` (its `node:net` layer cost
 * the relay about 2.7 times the CPU: 480 to 540 ms against 170 to 200 ms
 * per 256 MiB, unix socket to TCP, measured here), on Bun its own
 * `Bun.listen` / `Bun.connect` (its `node:net` layer, streams and events
 * over the same sockets, cost about twice the CPU per MiB). Private to net/.
 *
 * @module
 */

/** One connected stream socket. */
export interface Stream {
  /**
   * The next bytes, or `null` at end of stream. They are valid until the
   * next `read()` (a Deno stream reuses its buffer): copy what must be
   * kept longer.
   */
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

/**
 * The read buffer of a Deno stream, allocated once and reused for every
 * read: a fresh 64 KiB buffer per read (zeroed, then collected) cost the
 * relay about a third of its CPU (docs/benchmarks.md, the network row).
 */
const CHUNK_BYTES = 64 * 1024;

/**
 * The read buffer of a Deno stream once a read brought half of
 * {@linkcode CHUNK_BYTES} or more (bulk traffic): four times fewer reads and writes, each an
 * op and an event-loop turn, for the same bytes; about half the relay's
 * CPU per MiB.
 */
const LARGE_CHUNK_BYTES = 256 * 1024;

/**
 * How many Deno streams of this process may hold a large buffer at once
 * (16 MiB together); the others keep {@linkcode CHUNK_BYTES}.
 */
const LARGE_BUFFERS = 64;

/** The Deno streams holding a large buffer now. */
let largeBuffers = 0;

/**
 * How many chunks a Bun socket may read ahead of its reader before it is
 * paused (a pause and resume per chunk cost Bun's relay throughput).
 */
const QUEUED_CHUNKS = 8;

/**
 * How many bytes all the Bun sockets of this process may hold read
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
  /** The read buffer, reused: the relay is done with a chunk before it reads again. */
  let buffer: Uint8Array | undefined;
  let large = false;
  return {
    async read() {
      buffer ??= new Uint8Array(CHUNK_BYTES);
      const n = await conn.read(buffer);
      if (n === null) return null;
      // A read of half the buffer or more: bulk traffic, which larger
      // reads (fewer ops) carry for less CPU, within the process's budget.
      if (
        n >= CHUNK_BYTES / 2 && !large && !closed &&
        largeBuffers < LARGE_BUFFERS
      ) {
        const chunk = buffer.slice(0, n);
        large = true;
        largeBuffers++;
        buffer = new Uint8Array(LARGE_CHUNK_BYTES);
        return chunk;
      }
      return buffer.subarray(0, n);
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
      if (large) largeBuffers--;
      large = false;
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

/** What the relay uses of a Bun socket (`Bun.listen`, `Bun.connect`). */
interface BunSocket {
  data: BunState;
  write(data: Uint8Array): number;
  shutdown(halfClose?: boolean): void;
  terminate(): void;
  pause(): void;
  resume(): void;
  setNoDelay(noDelay?: boolean): boolean;
}

/** A Bun socket's side of a {@linkcode Stream}. */
interface BunState {
  chunks: Uint8Array[];
  queued: number;
  paused: boolean;
  ended: boolean;
  failure: Error | undefined;
  /** Wakes a read waiting for data. */
  wake: (() => void) | undefined;
  /** Wakes a write waiting for the socket to drain. */
  drained: (() => void) | undefined;
  closed: boolean;
}

interface BunNet {
  listen(
    options: Record<string, unknown>,
  ): { stop(closeActive?: boolean): void };
  connect(options: Record<string, unknown>): Promise<BunSocket>;
}

function bunState(): BunState {
  return {
    chunks: [],
    queued: 0,
    paused: false,
    ended: false,
    failure: undefined,
    wake: undefined,
    drained: undefined,
    closed: false,
  };
}

function wakeBun(state: BunState): void {
  const read = state.wake;
  state.wake = undefined;
  read?.();
  const write = state.drained;
  state.drained = undefined;
  write?.();
}

/**
 * The handlers of every Bun socket of the relay: data is queued for the
 * reader (the socket paused past {@linkcode QUEUED_CHUNKS} chunks, or once
 * the process holds {@linkcode QUEUED_TOTAL_BYTES} ahead of its readers),
 * an end or an error wakes it.
 */
const BUN_HANDLERS = {
  binaryType: "uint8array",
  open(socket: BunSocket) {
    socket.data ??= bunState();
  },
  data(socket: BunSocket, chunk: Uint8Array) {
    const state = socket.data;
    state.chunks.push(chunk);
    state.queued += chunk.byteLength;
    queuedTotal += chunk.byteLength;
    if (
      !state.paused &&
      (state.chunks.length >= QUEUED_CHUNKS ||
        queuedTotal >= QUEUED_TOTAL_BYTES)
    ) {
      state.paused = true;
      socket.pause();
    }
    wakeBun(state);
  },
  drain(socket: BunSocket) {
    wakeBun(socket.data);
  },
  end(socket: BunSocket) {
    socket.data.ended = true;
    wakeBun(socket.data);
  },
  close(socket: BunSocket, error?: Error) {
    const state = socket.data;
    if (state === undefined) return;
    state.ended = true;
    if (error !== undefined) state.failure ??= error;
    state.closed = true;
    wakeBun(state);
  },
  error(socket: BunSocket, error: Error) {
    if (socket.data === undefined) return;
    socket.data.failure ??= error;
    wakeBun(socket.data);
  },
};

/** A Bun socket as a {@linkcode Stream}. */
function bunStream(socket: BunSocket): Stream {
  const state = socket.data;
  return {
    async read() {
      while (true) {
        const chunk = state.chunks.shift();
        if (chunk !== undefined) {
          state.queued -= chunk.byteLength;
          queuedTotal -= chunk.byteLength;
          return chunk;
        }
        if (state.failure !== undefined) throw state.failure;
        if (state.ended) return null;
        const waiting = new Promise<void>((resolve) => (state.wake = resolve));
        if (state.paused) {
          state.paused = false;
          socket.resume();
        }
        await waiting;
      }
    },
    async write(bytes) {
      let offset = 0;
      while (offset < bytes.byteLength) {
        if (state.failure !== undefined) throw state.failure;
        const written = socket.write(bytes.subarray(offset));
        if (written < 0 || state.closed) {
          throw state.failure ??
            new Error("Cannot write: the socket is closed");
        }
        offset += written;
        if (offset < bytes.byteLength) {
          await new Promise<void>((resolve) => (state.drained = resolve));
        }
      }
    },
    closeWrite() {
      try {
        if (!state.closed) socket.shutdown();
      } catch {
        // Closed already.
      }
      return Promise.resolve();
    },
    close() {
      if (!state.closed) {
        state.closed = true;
        try {
          socket.terminate();
        } catch {
          // Closed already.
        }
      }
      // What nobody will read leaves the process's total.
      queuedTotal -= state.queued;
      state.queued = 0;
      state.chunks.length = 0;
      wakeBun(state);
    },
  };
}

function bunIo(bun: BunNet): NetIo {
  const listen = (
    address: Record<string, unknown>,
    onStream: (stream: Stream) => void,
    noDelay: boolean,
  ): Promise<Listener> => {
    try {
      const listener = bun.listen({
        ...address,
        allowHalfOpen: true,
        socket: {
          ...BUN_HANDLERS,
          open(socket: BunSocket) {
            socket.data = bunState();
            if (noDelay) socket.setNoDelay(true);
            onStream(bunStream(socket));
          },
        },
      });
      let stopped = false;
      return Promise.resolve({
        close() {
          if (stopped) return;
          stopped = true;
          listener.stop();
        },
      });
    } catch (error: unknown) {
      return Promise.reject(error);
    }
  };
  const connect = async (
    address: Record<string, unknown>,
    noDelay: boolean,
  ): Promise<Stream> => {
    const socket = await bun.connect({
      ...address,
      allowHalfOpen: true,
      data: bunState(),
      socket: BUN_HANDLERS,
    });
    if (noDelay) socket.setNoDelay(true);
    return bunStream(socket);
  };
  return {
    listenUnix: (path, onStream) => listen({ unix: path }, onStream, false),
    listenTcp: (host, port, onStream) =>
      listen({ hostname: host, port }, onStream, true),
    connectUnix: (path) => connect({ unix: path }, false),
    async connectTcp(host, port, timeoutMs) {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const connecting = connect({ hostname: host, port }, true);
      try {
        return await Promise.race([
          connecting,
          new Promise<never>((_, reject) => {
            timer = setTimeout(
              () => reject(new Error(`no answer within ${timeoutMs} ms`)),
              timeoutMs,
            );
          }),
        ]);
      } catch (error: unknown) {
        connecting.then((stream) => stream.close(), () => {});
        throw error;
      } finally {
        clearTimeout(timer);
      }
    },
  };
}

let io: NetIo | undefined;

/**
 * This runtime's sockets: Deno's own on Deno, Bun's own on Bun.
 *
 * @returns The implementation, made on first use.
 * @throws {Error} on another runtime.
 */
export function netIo(): NetIo {
  if (io !== undefined) return io;
  const global = globalThis as unknown as { Deno?: DenoNet; Bun?: BunNet };
  if (global.Bun !== undefined) io = bunIo(global.Bun);
  else if (global.Deno !== undefined) io = denoIo(global.Deno);
  else throw new Error("Cannot relay: this runtime is neither Deno nor Bun");
  return io;
}
