/**
 * Builds the native confine step (src/runtime/sandbox/native/confine.c)
 * for each architecture a compiler is found for, and writes its bytes as
 * TypeScript modules (base64) beside the source, so that airlock ships no
 * separate binary and needs no compiler where it runs. The build is
 * reproducible: fixed flags, no build id, no file names, stripped; so
 * tests/runtime/native_confine_build_test.ts rebuilds with this machine's
 * compiler and compares the bytes.
 *
 * Run: `node_modules/.bin/deno run -A scripts/build_native_confine.ts`
 * (from the repository root).
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

/** The source, relative to the repository root (the build runs there). */
export const NATIVE_CONFINE_SOURCE = "src/runtime/sandbox/native/confine.c";

/** The flags of every build: freestanding, static, small, reproducible. */
export const NATIVE_CONFINE_FLAGS: readonly string[] = [
  "-std=c11",
  "-Wall",
  "-Wextra",
  "-Werror",
  "-Os",
  "-static",
  "-nostdlib",
  "-ffreestanding",
  "-fno-pie",
  "-no-pie",
  "-fno-stack-protector",
  "-fno-stack-clash-protection",
  "-fcf-protection=none",
  "-fno-asynchronous-unwind-tables",
  "-fno-unwind-tables",
  "-fno-ident",
  "-U_FORTIFY_SOURCE",
  "-Wl,--build-id=none",
  "-Wl,-z,noexecstack",
  "-Wl,-z,norelro",
  "-Wl,-z,noseparate-code",
  "-Wl,--hash-style=gnu",
  "-s",
];

/** One target: its compiler and the module its bytes go to. */
export interface NativeConfineTarget {
  /** `process.arch`'s name for it. */
  arch: "x64" | "arm64";
  /** The compiler (Debian's names). */
  compiler: string;
  /** The generated module, relative to the repository root. */
  module: string;
}

/** The targets, by architecture. */
export const NATIVE_CONFINE_TARGETS: readonly NativeConfineTarget[] = [
  {
    arch: "x64",
    compiler: "x86_64-linux-gnu-gcc",
    module: "src/runtime/sandbox/native/confine_x64.ts",
  },
  {
    arch: "arm64",
    compiler: "aarch64-linux-gnu-gcc",
    module: "src/runtime/sandbox/native/confine_arm64.ts",
  },
];

/**
 * The compiler's first line of `--version`, or `undefined` when it is not
 * installed.
 *
 * @param compiler The compiler's name.
 * @returns Its version line.
 */
export function compilerVersion(compiler: string): string | undefined {
  try {
    return execFileSync(compiler, ["--version"], { encoding: "utf8" })
      .split("\n")[0]?.trim();
  } catch {
    return undefined;
  }
}

/**
 * Compiles the step with one compiler.
 *
 * @param root The repository root.
 * @param compiler The compiler's name.
 * @returns The ELF's bytes.
 */
export function buildNativeConfine(root: string, compiler: string): Uint8Array {
  const dir = mkdtempSync(join(tmpdir(), "airlock-native-confine-"));
  try {
    const out = join(dir, "confine");
    execFileSync(
      compiler,
      [
        ...NATIVE_CONFINE_FLAGS,
        // No path of this machine in the bytes.
        `-ffile-prefix-map=${root}=.`,
        "-o",
        out,
        NATIVE_CONFINE_SOURCE,
      ],
      { cwd: root, stdio: ["ignore", "inherit", "inherit"] },
    );
    return new Uint8Array(readFileSync(out));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The text of a generated module.
 *
 * @param target The target.
 * @param bytes The ELF's bytes.
 * @param version The compiler's version line.
 * @returns TypeScript source.
 */
export function nativeConfineModule(
  target: NativeConfineTarget,
  bytes: Uint8Array,
  version: string,
): string {
  const base64 = btoa(String.fromCharCode(...bytes));
  return `/**
 * The native confine step for ${target.arch}, built from confine.c by
 * scripts/build_native_confine.ts: generated, do not edit.
 *
 * @module
 */

/** The compiler that built it (a rebuild with the same one gives the same bytes). */
export const NATIVE_CONFINE_COMPILER =
  ${JSON.stringify(version)};

/** The static ELF, in base64 (${bytes.byteLength} bytes). */
export const NATIVE_CONFINE_ELF =
  ${JSON.stringify(base64)};
`;
}

if (import.meta.main) {
  const root = process.cwd();
  for (const target of NATIVE_CONFINE_TARGETS) {
    const version = compilerVersion(target.compiler);
    if (version === undefined) {
      process.stderr.write(
        `skipping ${target.arch}: no ${target.compiler} (apt-get install gcc-${
          target.compiler.replace(/-gcc$/, "")
        })\n`,
      );
      continue;
    }
    const bytes = buildNativeConfine(root, target.compiler);
    writeFileSync(
      join(root, target.module),
      nativeConfineModule(target, bytes, version),
    );
    process.stdout.write(
      `${target.module}: ${bytes.byteLength} bytes (${version})\n`,
    );
  }
}
