// The conformance suite against airlock's own TypeScript worker, started
// through the `command` option like any other implementation.
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { conformance } from "./conformance.ts";

checkNoLeaks();

const entry = fileURLToPath(new URL("../../workers/entry.ts", import.meta.url));
const worker = new URL("./typescript_worker.ts", import.meta.url).href;

function denoDir(): string | undefined {
  const explicit = process.env.DENO_DIR;
  if (explicit) return explicit;
  const cache = process.env.XDG_CACHE_HOME ??
    (process.env.HOME ? join(process.env.HOME, ".cache") : undefined);
  return cache ? join(cache, "deno") : undefined;
}

const dir = denoDir();

conformance({
  name: `typescript on ${RUNTIME}`,
  command: RUNTIME === "deno"
    ? [process.execPath, "run", "-A", "--quiet", entry, worker]
    : [process.execPath, entry, worker],
  env: RUNTIME === "deno" && dir ? { DENO_DIR: dir } : {},
});
