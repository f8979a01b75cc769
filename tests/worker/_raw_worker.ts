/**
 * A worker process spawned directly with `Deno.Command` or `Bun.spawn`, no
 * parent API: raw frames in, frames and stray bytes out. For the end-to-end
 * tests of the serve loop.
 *
 * @module
 */

import process from "node:process";
import { fileURLToPath } from "node:url";
import { FrameReader } from "../../src/protocol/frame_reader.ts";
import { decodeMessage, type Message } from "../../src/protocol/messages.ts";
import { encodeMessage } from "../../src/protocol/encode_message.ts";
import { denoMainModule } from "../../src/runtime/launch/deno_command.ts";
import { RUNTIME } from "../_helpers/runtime.ts";

const ENTRY = new URL("../../workers/entry.ts", import.meta.url);

/** How a process ended. */
export interface RawExit {
  /** Exit code, or null when a signal ended it. */
  code: number | null;
  /** Signal name, or null. */
  signal: string | null;
}

/** A bare worker process. */
export interface RawWorker extends AsyncDisposable {
  /** Its pid. */
  readonly pid: number;
  /** Messages received so far, in order. */
  readonly received: Message[];
  /** Stray stdout bytes, as text. */
  readonly stray: () => string;
  /** Its stderr so far. */
  readonly stderr: () => string;
  /** Settles when it exits. */
  readonly exited: Promise<RawExit>;
  /** Writes one message as a frame. */
  send(message: Message): Promise<void>;
  /** Writes raw bytes (after the messages sent before). */
  sendBytes(bytes: Uint8Array): Promise<void>;
  /**
   * Waits for the next message matching `match` not yet taken.
   *
   * @param match Which message.
   * @param ms Deadline.
   */
  next(match: (message: Message) => boolean, ms?: number): Promise<Message>;
  /** Closes its stdin (end-of-file). */
  closeStdin(): Promise<void>;
  /** SIGKILLs it. */
  kill(): void;
}

interface BunSink {
  write(chunk: Uint8Array): number;
  flush(): number | Promise<number>;
  end(): number | Promise<number>;
}

interface BunChild {
  pid: number;
  stdin: BunSink;
  stdout: ReadableStream<Uint8Array>;
  stderr: ReadableStream<Uint8Array>;
  exited: Promise<number>;
  exitCode: number | null;
  signalCode: string | null;
  kill(signal?: string): void;
}

interface Spawned {
  pid: number;
  stdout: ReadableStream<Uint8Array>;
  stderr: ReadableStream<Uint8Array>;
  write(chunk: Uint8Array): Promise<void>;
  close(): Promise<void>;
  exited: Promise<RawExit>;
  kill(): void;
}

function spawnDeno(module: URL, watchdog: boolean): Spawned {
  const child = new Deno.Command(process.execPath, {
    args: [
      "run",
      "--quiet",
      "--no-prompt",
      denoMainModule(ENTRY, module, "raw", watchdog),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
    env: { NO_COLOR: "1" },
  }).spawn();
  const writer = child.stdin.getWriter();
  return {
    pid: child.pid,
    stdout: child.stdout,
    stderr: child.stderr,
    write: (chunk) => writer.write(chunk),
    close: () => writer.close().catch(() => {}),
    exited: child.status.then((s) => ({
      code: s.signal ? null : s.code,
      signal: s.signal ?? null,
    })),
    kill: () => {
      try {
        child.kill("SIGKILL");
      } catch {
        // Gone.
      }
    },
  };
}

function spawnBun(module: URL, watchdog: boolean): Spawned {
  const bun = (globalThis as unknown as {
    Bun: { spawn(argv: string[], options: object): BunChild };
  }).Bun;
  const child = bun.spawn(
    [
      process.execPath,
      fileURLToPath(ENTRY),
      module.href,
      ...(watchdog ? ["--parent-watchdog"] : []),
    ],
    {
      stdin: "pipe",
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, NO_COLOR: "1" },
    },
  );
  return {
    pid: child.pid,
    stdout: child.stdout,
    stderr: child.stderr,
    async write(chunk) {
      const slice = 1024 * 1024;
      for (let at = 0; at < chunk.byteLength; at += slice) {
        child.stdin.write(chunk.subarray(at, at + slice));
        await child.stdin.flush();
      }
    },
    async close() {
      await child.stdin.end();
    },
    exited: child.exited.then(() => ({
      code: child.signalCode ? null : child.exitCode,
      signal: child.signalCode ?? null,
    })),
    kill: () => child.kill("SIGKILL"),
  };
}

/**
 * Spawns `workers/entry.ts` serving `module`, as airlock would but with no
 * wrapper and no parent API.
 *
 * @param module The worker module.
 * @param options Whether the worker starts its parent-death watchdog.
 * @returns The worker.
 */
export function spawnRawWorker(
  module: URL,
  options: { parentWatchdog?: boolean } = {},
): RawWorker {
  const watchdog = options.parentWatchdog ?? false;
  const child = RUNTIME === "deno"
    ? spawnDeno(module, watchdog)
    : spawnBun(module, watchdog);
  const received: Message[] = [];
  const taken = new Set<number>();
  const waiters: (() => void)[] = [];
  const stray: Uint8Array[] = [];
  let stderr = "";
  let failure: unknown;
  const wake = () => {
    for (const waiter of waiters.splice(0)) waiter();
  };
  const frames = new FrameReader({
    onFrame: (frame) => {
      received.push(decodeMessage(frame));
      wake();
    },
    onStray: (bytes) => stray.push(bytes.slice()),
  });
  const pumped = (async () => {
    try {
      for await (const chunk of child.stdout) frames.push(chunk);
    } catch (error: unknown) {
      failure = error;
    }
    wake();
  })();
  void (async () => {
    const decoder = new TextDecoder();
    for await (const chunk of child.stderr) {
      stderr += decoder.decode(chunk, { stream: true });
    }
  })().catch(() => {});
  let writes = Promise.resolve();
  let stdinClosed = false;
  return {
    pid: child.pid,
    received,
    stray: () => new TextDecoder().decode(concatAll(stray)),
    stderr: () => stderr,
    exited: child.exited,
    send(message) {
      const chunks = encodeMessage(message);
      writes = writes.then(async () => {
        for (const chunk of chunks) await child.write(chunk);
      });
      return writes;
    },
    sendBytes(bytes) {
      writes = writes.then(() => child.write(bytes));
      return writes;
    },
    async next(match, ms = 30_000) {
      const end = Date.now() + ms;
      while (true) {
        const index = received.findIndex((m, i) => !taken.has(i) && match(m));
        if (index !== -1) {
          taken.add(index);
          return received[index]!;
        }
        if (failure) throw failure;
        const left = end - Date.now();
        if (left <= 0) {
          throw new Error(
            `Deadline: no matching message within ${ms} ms; received ${
              JSON.stringify(received.map((m) => [m.type, m.id]))
            }; stderr: ${stderr}`,
          );
        }
        await Promise.race([
          new Promise<void>((resolve) => waiters.push(resolve)),
          new Promise((resolve) => setTimeout(resolve, Math.min(left, 1_000))),
          pumped.then(() => new Promise((resolve) => setTimeout(resolve, 50))),
        ]);
      }
    },
    async closeStdin() {
      stdinClosed = true;
      await writes.catch(() => {});
      await child.close();
    },
    kill: () => child.kill(),
    async [Symbol.asyncDispose]() {
      if (!stdinClosed) await this.closeStdin().catch(() => {});
      child.kill();
      await child.exited;
    },
  };
}

function concatAll(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let at = 0;
  for (const chunk of chunks) {
    out.set(chunk, at);
    at += chunk.byteLength;
  }
  return out;
}
