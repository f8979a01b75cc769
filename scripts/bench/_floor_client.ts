/**
 * The parent side of the floor: writes 4-byte-length frames to a child's
 * stdin and hands back the echoed frames in order. Hand-written, no codec,
 * using the same pipes airlock's adapters use.
 *
 * @module
 */

import type { PipedChild } from "./_runtime.ts";

/** Frames above this size are written as a header and the payload as is. */
const COPY_BYTES = 64 * 1024;

/** A floor connection: one echo child. */
export class FloorClient {
  #child: PipedChild;
  #waiters: ((payload: Uint8Array) => void)[] = [];
  #next = 0;
  #pumped: Promise<void>;

  /**
   * Starts reading the child's stdout.
   *
   * @param child A child running `floor_worker.ts`.
   */
  constructor(child: PipedChild) {
    this.#child = child;
    this.#pumped = this.#pump();
  }

  #deliver(payload: Uint8Array): void {
    const waiter = this.#waiters[this.#next];
    this.#waiters[this.#next++] = undefined as never;
    if (this.#next > 1024 && this.#next * 2 > this.#waiters.length) {
      this.#waiters = this.#waiters.slice(this.#next);
      this.#next = 0;
    }
    waiter?.(payload);
  }

  async #pump(): Promise<void> {
    const reader = this.#child.stdout.getReader();
    let pending = new Uint8Array(0);
    let large: Uint8Array | undefined;
    let filled = 0;
    while (true) {
      const { value, done } = await reader.read();
      if (done) return;
      let chunk = value;
      if (large) {
        const take = Math.min(large.byteLength - filled, chunk.byteLength);
        large.set(chunk.subarray(0, take), filled);
        filled += take;
        if (filled < large.byteLength) continue;
        this.#deliver(large);
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
          this.#deliver(data.subarray(pos + 4, end));
          pos = end;
          continue;
        }
        if (length > COPY_BYTES) {
          large = new Uint8Array(length);
          large.set(data.subarray(pos + 4), 0);
          filled = data.byteLength - pos - 4;
          pos = data.byteLength;
        }
        break;
      }
      pending = data.slice(pos);
    }
  }

  /**
   * Sends one frame and waits for its echo.
   *
   * @param payload The bytes.
   * @returns The echoed bytes.
   */
  request(payload: Uint8Array): Promise<Uint8Array> {
    const answer = new Promise<Uint8Array>((resolve) =>
      this.#waiters.push(resolve)
    );
    if (payload.byteLength <= COPY_BYTES) {
      const frame = new Uint8Array(4 + payload.byteLength);
      new DataView(frame.buffer).setUint32(0, payload.byteLength);
      frame.set(payload, 4);
      void this.#child.write(frame);
    } else {
      const header = new Uint8Array(4);
      new DataView(header.buffer).setUint32(0, payload.byteLength);
      void this.#child.write(header);
      void this.#child.write(payload);
    }
    return answer;
  }

  /** Closes the child's stdin and waits for it to exit. */
  async close(): Promise<void> {
    await this.#child.closeStdin().catch(() => {});
    const timer = setTimeout(() => this.#child.kill(), 5_000);
    await this.#child.exited;
    clearTimeout(timer);
    await this.#pumped.catch(() => {});
  }
}
