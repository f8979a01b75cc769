/**
 * What the bubblewrap tests share: the options every case starts from.
 * Not a test file.
 *
 * @module
 */

import type { BwrapOptions } from "../../src/runtime/sandbox/bwrap.ts";

/** A `refuse` callback for the lookups: throws the refusal as an error. */
export function refuse(detail: string): never {
  throw new Error(detail);
}

/** A Deno worker with nothing granted, as the cases start from. */
export const BASE: BwrapOptions = {
  bwrap: "/usr/bin/bwrap",
  runtimeBinary: "/opt/deno/deno",
  command: ["/opt/deno/deno", "run", "/app/main.ts"],
  readOnly: [],
  read: [],
  write: [],
  net: false,
  env: {},
  cwd: "/",
};
