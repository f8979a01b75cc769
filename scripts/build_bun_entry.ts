/**
 * Builds the pre-bundled worker entry of Bun workers ahead, at development
 * time (issue 23 item 2): `workers/entry.ts` and the modules it imports
 * into one JavaScript file, `workers/entry_bundle.js`, with the pinned Bun
 * (`node_modules/.bin/bun`), and writes `src/runtime/_bun_entry_bundle.ts`:
 * the bundle's SHA-256, the Bun that built it, and the SHA-256 of each
 * source it was built from. Both are checked in as part of airlock's code
 * (read-only to workers like the rest of it), so no process builds the
 * bundle where nothing changed; src/runtime/bun_entry.ts uses it only when
 * the sources it finds still hash to what is recorded (a vendored, edited
 * copy builds its own, once per process, as before). The build is
 * reproducible (no paths in it, fixed flags): tests/runtime/bun_entry_test.ts
 * rebuilds with the pinned Bun and compares, so a source change without a
 * rebuild fails `deno task test`.
 *
 * Run: `node_modules/.bin/deno run -A scripts/build_bun_entry.ts` (from the
 * repository root).
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { BUN_BUILD_FLAGS } from "../src/runtime/bun_entry.ts";

/** The bundle, relative to the repository root. */
export const BUN_ENTRY_BUNDLE_FILE = "workers/entry_bundle.js";

/** The generated module, relative to the repository root. */
export const BUN_ENTRY_BUNDLE_MODULE = "src/runtime/_bun_entry_bundle.ts";

/** What one build gives. */
export interface BunEntryBuild {
  /** The bundle's bytes. */
  bundle: Uint8Array;
  /** The sources it was built from, relative to the root, sorted. */
  sources: string[];
  /** The Bun that built it (`bun --version`). */
  bun: string;
}

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/**
 * Builds the bundle with the pinned Bun, exactly as a parent would (same
 * flags, `--config=/dev/null`), from the repository root.
 *
 * @param root The repository root.
 * @returns The bundle, its sources and the Bun version.
 */
export function buildBunEntry(root: string): BunEntryBuild {
  const bun = join(root, "node_modules", ".bin", "bun");
  const dir = mkdtempSync(join(tmpdir(), "airlock-bun-entry-"));
  try {
    const out = join(dir, "entry.js");
    const meta = join(dir, "meta.json");
    execFileSync(
      bun,
      [
        "--config=/dev/null",
        "build",
        "./workers/entry.ts",
        ...BUN_BUILD_FLAGS,
        `--metafile=${meta}`,
        `--outfile=${out}`,
      ],
      {
        cwd: root,
        stdio: ["ignore", "ignore", "inherit"],
        env: { PATH: process.env.PATH ?? "/usr/bin:/bin", NO_COLOR: "1" },
      },
    );
    const inputs = (JSON.parse(readFileSync(meta, "utf8")) as {
      inputs: Record<string, unknown>;
    }).inputs;
    return {
      bundle: new Uint8Array(readFileSync(out)),
      sources: Object.keys(inputs).sort(),
      bun: execFileSync(bun, ["--version"], { encoding: "utf8" }).trim(),
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The text of the generated module for a build.
 *
 * @param root The repository root (the sources are read from it).
 * @param build The build.
 * @returns TypeScript source.
 */
export function bunEntryBundleModule(
  root: string,
  build: BunEntryBuild,
): string {
  // As deno fmt leaves it (each pair is longer than a line).
  const sources = build.sources.map((path) =>
    `    [\n      ${JSON.stringify(path)},\n      "${
      sha256(new Uint8Array(readFileSync(join(root, path))))
    }",\n    ],`
  );
  return `/**
 * The pre-bundled worker entry of Bun workers (\`${BUN_ENTRY_BUNDLE_FILE}\`),
 * built by scripts/build_bun_entry.ts: generated, do not edit. After a
 * change to any source listed below, rebuild it with
 * \`node_modules/.bin/deno run -A scripts/build_bun_entry.ts\` and commit
 * both files: tests/runtime/bun_entry_test.ts fails until then, and Bun
 * workers run a bundle built per process meanwhile.
 *
 * @module
 */

/** The checked-in bundle and what it was built from. */
export const BUN_ENTRY_BUNDLE: {
  /** The bundle, relative to airlock's root. */
  readonly file: string;
  /** The SHA-256 (hex) of its bytes. */
  readonly sha256: string;
  /** The Bun that built it. */
  readonly bun: string;
  /** Each source (relative to airlock's root) and its SHA-256. */
  readonly sources: readonly (readonly [string, string])[];
} = {
  file: ${JSON.stringify(BUN_ENTRY_BUNDLE_FILE)},
  sha256: "${sha256(build.bundle)}",
  bun: ${JSON.stringify(build.bun)},
  sources: [
${sources.join("\n")}
  ],
};
`;
}

if (import.meta.main) {
  const root = process.cwd();
  const build = buildBunEntry(root);
  writeFileSync(join(root, BUN_ENTRY_BUNDLE_FILE), build.bundle);
  writeFileSync(
    join(root, BUN_ENTRY_BUNDLE_MODULE),
    bunEntryBundleModule(root, build),
  );
  process.stdout.write(
    `${BUN_ENTRY_BUNDLE_FILE}: ${build.bundle.byteLength} bytes from ${build.sources.length} sources (Bun ${build.bun})\n`,
  );
}
