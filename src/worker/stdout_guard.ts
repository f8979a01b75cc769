/**
 * Keeps stdout for frames: console output that would go to stdout goes to
 * stderr instead. Installed before any user code loads.
 *
 * @module
 */

const TO_STDERR = ["log", "info", "debug", "dir", "dirxml", "table"] as const;

/**
 * Redirects `console.log`, `info`, `debug`, `dir`, `dirxml` and `table` to
 * `console.error` (stderr). Native code or libraries writing to the stdout
 * file directly are not caught here; the parent treats such bytes as stray
 * output and logs them.
 */
export function installStdoutGuard(): void {
  const target = console as unknown as Record<string, unknown>;
  const error = console.error.bind(console);
  for (const name of TO_STDERR) target[name] = error;
}
