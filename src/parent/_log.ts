/**
 * A worker's log output: where lines go (the sink and who wrote them), the
 * bounded tail kept for crash reports, and the splitting of a byte stream
 * into lines. Private to src/parent.
 *
 * @module
 */

/** Characters of stderr (and stray stdout) kept for crash reports. */
export const STDERR_TAIL_BYTES = 8 * 1024;

/** Where a worker's log lines go. */
export type LogSink = (line: string, source: LogSource) => void;

/** Who wrote a log line. */
export interface LogSource {
  /** The worker module (or command). */
  module: string;
  /** The worker's pid. */
  pid: number;
  /** `"stderr"`, or `"stdout"` for stray bytes on the frame stream. */
  stream: "stderr" | "stdout";
}

/** The last {@linkcode STDERR_TAIL_BYTES} characters of a worker's output. */
export class OutputTail {
  #text = "";

  /** The tail so far. */
  get text(): string {
    return this.#text;
  }

  /**
   * Appends text, dropping the oldest beyond the limit.
   *
   * @param text What the worker wrote.
   */
  push(text: string): void {
    this.#text += text;
    if (this.#text.length > STDERR_TAIL_BYTES) {
      this.#text = this.#text.slice(this.#text.length - STDERR_TAIL_BYTES);
    }
  }
}

/** Splits decoded text into lines, keeping an unfinished line for the next chunk. */
export class LineSplitter {
  #partial = "";

  /**
   * Splits a chunk, handing each finished line to `emit`.
   *
   * @param text The chunk.
   * @param emit Receives each line.
   */
  push(text: string, emit: (line: string) => void): void {
    const lines = (this.#partial + text).split("\n");
    this.#partial = lines.pop() ?? "";
    for (const line of lines) emit(line);
  }

  /**
   * Hands the unfinished line, if any, to `emit`.
   *
   * @param emit Receives the line.
   */
  end(emit: (line: string) => void): void {
    if (this.#partial) emit(this.#partial);
    this.#partial = "";
  }
}
