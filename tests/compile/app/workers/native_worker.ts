// The worker of the native add-on test: loads a real N-API add-on by a
// name computed at run time, as @libsql/client (`@libsql/linux-x64-gnu`) and
// lmdb do, which `bun build --compile` cannot embed. Not a test file.
import { createRequire } from "node:module";
import process from "node:process";
import { defineWorker } from "../../../../worker.ts";

/** The platform package's suffix, e.g. `linux-x64`. */
function target(): string {
  return `${process.platform}-${process.arch}`;
}

const require = createRequire(import.meta.url);
const addon = require(
  `@msgpackr-extract/msgpackr-extract-${target()}/node.napi.glibc.node`,
) as Record<string, unknown>;

export default defineWorker({
  /** The type of the add-on's one export, `extractStrings`. */
  addonExport(): string {
    return typeof addon.extractStrings;
  },
});
