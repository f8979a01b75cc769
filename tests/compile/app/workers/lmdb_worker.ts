// The worker of the lmdb test: opens an LMDB environment in the directory
// it is given and writes and reads one key. lmdb finds its add-on through
// node-gyp-build-optional-packages, which a compiled executable cannot
// follow into its embedded node_modules (package.json is not on disk):
// without the add-on beside the executable its import fails with "No native
// build was found for platform=linux arch=x64 runtime=node abi=unsupported".
// Not a test file.
import { open, type RootDatabase } from "lmdb";
import { defineWorker } from "../../../../worker.ts";

let db: RootDatabase<string, string> | undefined;

export default defineWorker({
  /** Opens the environment at `path`. */
  open(path: string): void {
    db = open<string, string>({ path });
  },
  /** Writes `value` under `key` and reads it back. */
  async roundTrip(key: string, value: string): Promise<string | undefined> {
    await db!.put(key, value);
    return db!.get(key);
  },
});
