/**
 * The program a Bun worker runs when airlock's worker side is pre-bundled
 * (src/runtime/bun_entry.ts):
 * `bun_loader.ts <bundle> <sha256> <module URL> [--parent-watchdog] [--chmod-fallback]`.
 *
 * Reads the bundle once, checks its bytes against the SHA-256 the parent
 * holds (recorded in airlock's code for the checked-in
 * `workers/entry_bundle.js`, or computed when the parent built one), and
 * runs those very bytes (through a Blob URL), never the file again: a
 * bundle rewritten on disk after the parent's check (by a worker of another
 * program granted write on the temporary directory) is refused, not run.
 * This file lies in airlock's own tree, trusted like the rest of airlock's
 * code.
 *
 * @module
 */

/**
 * The part of Bun's API the loader uses (not `node:crypto`: loading it costs
 * a Bun worker about 7 ms of CPU, most of what the bundle saves).
 */
interface BunApi {
  file(path: string): { bytes(): Promise<Uint8Array<ArrayBuffer>> };
  CryptoHasher: new (algorithm: "sha256") => {
    update(data: Uint8Array): unknown;
    digest(encoding: "hex"): string;
  };
}

/** The part of `process` the loader uses. */
interface ProcessApi {
  argv: string[];
  stderr: { write(text: string): unknown };
  exit(code: number): never;
}

const { Bun: bun, process } = globalThis as unknown as {
  Bun: BunApi;
  process: ProcessApi;
};

/** Exit status of a bundle that is not the one the parent built. */
const REFUSED = 3;

const [bundle = "", expected = "", specifier = "", ...flags] = process.argv
  .slice(2);
const bytes = await bun.file(bundle).bytes().catch((error: unknown) => {
  process.stderr.write(
    `airlock worker: cannot read the pre-bundled entry "${bundle}": ${
      error instanceof Error ? error.message : String(error)
    }\n`,
  );
  return process.exit(REFUSED);
});
const hasher = new bun.CryptoHasher("sha256");
hasher.update(bytes);
const actual = hasher.digest("hex");
if (expected === "" || actual !== expected || specifier === "") {
  process.stderr.write(
    `airlock worker: the pre-bundled entry "${bundle}" is not the one the parent built (sha256 ${actual}, expected ${expected}); refused\n`,
  );
  process.exit(REFUSED);
}
const url = URL.createObjectURL(new Blob([bytes], { type: "text/javascript" }));
const entry = await import(url) as typeof import("./entry.ts");
URL.revokeObjectURL(url);
await entry.runEntry(() => import(specifier), specifier, {
  parentWatchdog: flags.includes(entry.PARENT_WATCHDOG_FLAG),
  chmodFallback: flags.includes(entry.CHMOD_FALLBACK_FLAG),
});
