/**
 * Log sinks that keep a worker's stderr lines instead of printing them.
 *
 * @module
 */

import type { LogSource } from "../../types.ts";
import "./deno_dir.ts";

/** A log sink that keeps lines instead of printing them. */
export interface LogCapture {
  /** The sink to pass as `onStderr`. */
  onStderr: (line: string, source: LogSource) => void;
  /** The lines so far. */
  lines: string[];
}

/**
 * A log sink that keeps the worker's stderr lines.
 *
 * @returns The capture.
 */
export function captureLog(): LogCapture {
  const lines: string[] = [];
  const capture = { onStderr: (line: string) => void lines.push(line) };
  // Not enumerable: `{ ...captureLog() }` spreads into options, which refuse
  // unknown keys.
  Object.defineProperty(capture, "lines", { value: lines, enumerable: false });
  return capture as unknown as LogCapture;
}
