/**
 * The default log sink and the escaping of a worker's log line for the
 * parent's terminal (option resolution picks the default sink when airlock
 * is imported; the rest of a worker's log, _log.ts, loads with its
 * connection). Private to src/parent.
 *
 * @module
 */

import type { LogSource } from "./options.ts";

/** Where a worker's log lines go. */
export type LogSink = (line: string, source: LogSource) => void;

/**
 * Control characters a terminal acts on: C0 controls but tab, DEL, C1
 * controls (ESC sequences, CSI), and the bidirectional overrides that
 * reorder what is shown.
 */
const TERMINAL_CONTROLS =
  // deno-lint-ignore no-control-regex
  /[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

/**
 * Makes a worker's log line safe to print on the parent's terminal: every
 * control character a terminal would act on (escape sequences that move the
 * cursor, recolour, retitle the window or rewrite earlier lines, `\r`,
 * bidirectional overrides) is shown escaped (`\x1b`, `\r`, `\u202e`)
 * instead. Text without them is returned as is.
 *
 * @param line The line as the worker wrote it.
 * @returns The line with its control characters escaped.
 */
export function escapeLogLine(line: string): string {
  TERMINAL_CONTROLS.lastIndex = 0;
  if (!TERMINAL_CONTROLS.test(line)) return line;
  return line.replace(TERMINAL_CONTROLS, (char) => {
    if (char === "\r") return "\\r";
    const code = char.charCodeAt(0);
    return code <= 0xff
      ? `\\x${code.toString(16).padStart(2, "0")}`
      : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

/** Characters of log text the default sink holds before it writes at once. */
const SINK_FLUSH_CHARS = 1024 * 1024;

/**
 * The default log sink: each line prefixed with the module and pid
 * (`[db.ts 4242] …`), its terminal controls escaped
 * ({@linkcode escapeLogLine}). The lines of one chunk of output are written
 * together, in one write after the chunk (or once a megabyte is held): with
 * a write per line, a worker printing empty lines held the parent's event
 * loop for seconds (docs/benchmarks.md, "Figures behind the code").
 *
 * @param write Writes text to the parent's stderr, synchronously.
 * @returns The sink.
 */
export function defaultLogSink(write: (text: string) => void): LogSink {
  let held: string[] = [];
  let chars = 0;
  let scheduled = false;
  const flush = (): void => {
    scheduled = false;
    if (held.length === 0) return;
    const text = held.join("");
    held = [];
    chars = 0;
    write(text);
  };
  return (line, source) => {
    const text = `[${source.module} ${source.pid}] ${escapeLogLine(line)}\n`;
    held.push(text);
    chars += text.length;
    if (chars >= SINK_FLUSH_CHARS) flush();
    else if (!scheduled) {
      scheduled = true;
      queueMicrotask(flush);
    }
  };
}
