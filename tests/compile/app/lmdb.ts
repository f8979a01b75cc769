// deno-lint-ignore-file no-console
// A compiled program whose worker uses lmdb, built by
// tests/compile/compile_test.ts. Argument: the data directory. lmdb's
// add-on is looked up in prebuilds/<platform>-<arch>/ beside the executable
// (node-gyp-build-optional-packages looks there when its own package cannot
// be read), which the worker is granted. Prints one JSON line.
import { dirname, join } from "node:path";
import process from "node:process";
import { session } from "../../../mod.ts";
import type lmdb from "./workers/lmdb_worker.ts";

const data = process.argv[2] ?? "./data";
const prebuilds = join(dirname(process.execPath), "prebuilds");
try {
  await using s = await session<typeof lmdb>(
    new URL("./workers/lmdb_worker.ts", import.meta.url),
    {
      permissions: { read: [prebuilds, data], write: [data] },
      setup: [["open", data]],
      onStderr: () => {},
      maxRetries: 0,
    },
  );
  console.log(JSON.stringify({ value: await s.roundTrip("k", "v") }));
} catch (error: unknown) {
  console.log(JSON.stringify({
    error: error instanceof Error
      ? `${error.name}: ${error.message}`
      : String(error),
  }));
}
