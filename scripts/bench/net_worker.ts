// The worker of the bench's network row (scenario "net"): a TCP client that
// measures, from inside its sandbox, the round trip of one byte and the
// throughput of 64 KiB writes to an echo server: connected directly
// (net: true, the host's network) or through the forwarder and the parent's
// broker (a host:port grant).
import { connect, type Socket } from "node:net";
import { defineWorker } from "../../worker.ts";

function open(host: string, port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port, noDelay: true });
    socket.once("connect", () => resolve(socket));
    socket.once("error", reject);
  });
}

export default defineWorker({
  /** `n` one-byte round trips after `warmup`: each one's µs. */
  async pingPong(
    host: string,
    port: number,
    warmup: number,
    n: number,
  ): Promise<number[]> {
    const socket = await open(host, port);
    const byte = new Uint8Array([1]);
    const times: number[] = [];
    try {
      for (let i = 0; i < warmup + n; i++) {
        const started = performance.now();
        await new Promise<void>((resolve) => {
          socket.once("data", () => resolve());
          socket.write(byte);
        });
        if (i >= warmup) times.push((performance.now() - started) * 1000);
      }
    } finally {
      socket.destroy();
    }
    return times;
  },
  /** Sends `bytes` in 64 KiB writes and reads them back: MiB/s. */
  async bulk(host: string, port: number, bytes: number): Promise<number> {
    const socket = await open(host, port);
    const chunk = new Uint8Array(64 * 1024).fill(7);
    try {
      const started = performance.now();
      let received = 0;
      const done = new Promise<void>((resolve, reject) => {
        socket.on("data", (data: Uint8Array) => {
          received += data.byteLength;
          if (received >= bytes) resolve();
        });
        socket.once("error", reject);
      });
      let sent = 0;
      const pump = (): void => {
        while (sent < bytes) {
          sent += chunk.byteLength;
          if (!socket.write(chunk)) {
            socket.once("drain", pump);
            return;
          }
        }
      };
      pump();
      await done;
      return bytes / 2 ** 20 / ((performance.now() - started) / 1000);
    } finally {
      socket.destroy();
    }
  },
});
