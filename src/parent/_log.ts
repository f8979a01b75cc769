/**
 * A worker's log output: where lines go (the sink and who wrote them), the
 * bounded tail kept for crash reports, and the splitting of a byte stream
 * into lines. Private to src/parent.
 *
 * @module
 */

import type { LogSink } from "./_log_sink.ts";

/** Characters of stderr (and stray stdout) kept for crash reports. */
export const STDERR_TAIL_BYTES = 8 * 1024;

/**
 * Longest log line handed to a sink, in characters: a longer line (a worker
 * writing megabytes without a newline) is handed over in pieces of this
 * length, so memory stays bounded and each byte is looked at a fixed number
 * of times.
 */
export const MAX_LOG_LINE_CHARS = 8 * 1024;

/**
 * The last {@linkcode STDERR_TAIL_BYTES} characters of a worker's output.
 * Appending costs amortised constant time per character: the text is cut
 * back only once it holds twice the limit.
 */
export class OutputTail {
  #text = "";

  /** The tail so far: at most {@linkcode STDERR_TAIL_BYTES} characters. */
  get text(): string {
    if (this.#text.length > STDERR_TAIL_BYTES) {
      this.#text = this.#text.slice(this.#text.length - STDERR_TAIL_BYTES);
    }
    return this.#text;
  }

  /**
   * Appends text, dropping the oldest beyond the limit.
   *
   * @param text What the worker wrote.
   */
  push(text: string): void {
    if (text.length >= STDERR_TAIL_BYTES) {
      this.#text = text.slice(text.length - STDERR_TAIL_BYTES);
      return;
    }
    this.#text += text;
    if (this.#text.length > 2 * STDERR_TAIL_BYTES) {
      this.#text = this.#text.slice(this.#text.length - STDERR_TAIL_BYTES);
    }
  }
}

/**
 * Splits decoded text into lines of at most {@linkcode MAX_LOG_LINE_CHARS}
 * characters. An unfinished line is kept (as pieces, never re-split) for the
 * next chunk until it passes the limit; then the limit's worth of it is
 * handed over as a line of its own. Work is linear in the text, memory bounded by the
 * limit.
 */
export class LineSplitter {
  #pieces: string[] = [];
  #length = 0;

  /**
   * Splits a chunk, handing each finished line (or full-length piece of a
   * long line) to `emit`.
   *
   * @param text The chunk.
   * @param emit Receives each line.
   */
  push(text: string, emit: (line: string) => void): void {
    let start = 0;
    while (true) {
      const newline = text.indexOf("\n", start);
      if (newline === -1) break;
      this.#add(text.slice(start, newline), emit);
      const line = this.#pieces.join("");
      this.#pieces = [];
      this.#length = 0;
      emit(line);
      start = newline + 1;
    }
    if (start < text.length) {
      this.#add(start === 0 ? text : text.slice(start), emit);
    }
  }

  /**
   * Hands the unfinished line, if any, to `emit`.
   *
   * @param emit Receives the line.
   */
  end(emit: (line: string) => void): void {
    if (this.#length > 0) emit(this.#pieces.join(""));
    this.#pieces = [];
    this.#length = 0;
  }

  /** Adds text to the unfinished line, handing over full-length pieces. */
  #add(text: string, emit: (line: string) => void): void {
    if (this.#length + text.length <= MAX_LOG_LINE_CHARS) {
      if (text.length > 0) this.#pieces.push(text);
      this.#length += text.length;
      return;
    }
    let line = this.#pieces.join("") + text;
    let at = 0;
    while (line.length - at > MAX_LOG_LINE_CHARS) {
      emit(line.slice(at, at + MAX_LOG_LINE_CHARS));
      at += MAX_LOG_LINE_CHARS;
    }
    line = line.slice(at);
    this.#pieces = line.length > 0 ? [line] : [];
    this.#length = line.length;
  }
}

/**
 * A worker's log output: its stderr and the stray text on its stdout,
 * decoded and split into bounded lines for the sink, plus the tail kept for
 * crash reports. A sink that throws does not break the connection.
 */
export class WorkerLog {
  readonly #sink: LogSink;
  readonly #who: () => { module: string; pid: number };
  readonly #tail = new OutputTail();
  readonly #strayDecoder = new TextDecoder();
  readonly #strayLines = new LineSplitter();
  #stderrReader: ReadableStreamDefaultReader<Uint8Array> | undefined;
  #quiet = false;

  /**
   * Creates the log of one worker.
   *
   * @param sink Where lines go.
   * @param who The worker's module and pid (the pid may change once it is ready).
   */
  constructor(sink: LogSink, who: () => { module: string; pid: number }) {
    this.#sink = sink;
    this.#who = who;
  }

  /** The tail of the worker's output (about 8 KiB at most). */
  get tail(): string {
    return this.#tail.text;
  }

  /**
   * Adds airlock's own note to the tail (not to the sink).
   *
   * @param text The note.
   */
  note(text: string): void {
    this.#tail.push(`\n[airlock: ${text}]\n`);
  }

  /**
   * Takes bytes the worker wrote to stdout outside a frame.
   *
   * @param bytes The bytes.
   */
  stray(bytes: Uint8Array): void {
    const text = this.#strayDecoder.decode(bytes, { stream: true });
    this.#tail.push(text);
    this.#strayLines.push(text, this.#emitStray);
  }

  /** Stdout ended: hands over its unfinished stray line. */
  endStray(): void {
    this.#strayLines.end(this.#emitStray);
  }

  /**
   * Reads the worker's stderr to its end, line by line into the sink.
   *
   * @param stream The worker's stderr.
   * @returns Settles once the stream has ended (never rejects).
   */
  async pumpStderr(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    const lines = new LineSplitter();
    const emit = (line: string) => this.#emit(line, "stderr");
    const reader = stream.getReader();
    this.#stderrReader = reader;
    try {
      while (true) {
        const { value, done } = await reader.read();
        if (done) break;
        const text = decoder.decode(value, { stream: true });
        this.#tail.push(text);
        lines.push(text, emit);
      }
    } catch {
      // The pipe went away with the process.
    }
    lines.end(emit);
  }

  /**
   * Keeps what the worker writes from now on out of the sink (it still
   * reaches the tail): the test kit's deliberate crash, whose crash report
   * (Bun's on SIGABRT, about 20 lines) is not the test's output.
   */
  quiet(): void {
    this.#quiet = true;
  }

  /** Stops reading stderr (output still held by a process that is gone). */
  cancelStderr(): void {
    this.#stderrReader?.cancel().catch(() => {});
  }

  #emitStray = (line: string): void => {
    if (line) this.#emit(line, "stdout");
  };

  #emit(line: string, stream: "stderr" | "stdout"): void {
    if (this.#quiet) return;
    try {
      this.#sink(line, { ...this.#who(), stream });
    } catch {
      // A throwing log sink must not break the connection.
    }
  }
}
