/**
 * The native confine step: a freestanding static program
 * (`native/confine.c`, its bytes in `native/confine_<arch>.ts`) that does
 * what the runtime confine step (`step.ts`) does in its confine form, at
 * the cost of an `execve` instead of a second Deno or Bun start. It runs
 * only inside bubblewrap, which creates it from bytes the parent writes to
 * the spawned process's descriptor 3 (`--ro-bind-data`, mode 0555, at
 * {@linkcode NATIVE_CONFINE_PATH}): the parent writes no file, and each
 * worker's copy lives in that worker's own mount namespace, read-only.
 * Whether it runs is the plan's decision (`plan.ts`); this encodes its
 * spec, the same {@linkcode ConfineSpec} the runtime step takes.
 *
 * @module
 */

import { addressHex } from "./net/targets.ts";
import { Buffer } from "../node_builtins.ts";
import {
  NATIVE_CONFINE_COMPILER as X64_COMPILER,
  NATIVE_CONFINE_ELF as X64_ELF,
} from "./native/confine_x64.ts";
import {
  NATIVE_CONFINE_COMPILER as ARM64_COMPILER,
  NATIVE_CONFINE_ELF as ARM64_ELF,
} from "./native/confine_arm64.ts";
import type { ConfineSpec } from "./spec.ts";

/**
 * Where bubblewrap puts the native step inside the sandbox: in its own
 * `/dev` (a tmpfs of the sandbox's, whatever the grants bind over `/`), so
 * that making the file never touches the host.
 */
export const NATIVE_CONFINE_PATH = "/dev/airlock-confine";

/**
 * The variable that, set to `1` in the parent's environment, keeps the
 * runtime confine step where the native one would run (tests and
 * measurements compare the two; both confine alike).
 */
export const RUNTIME_CONFINE_STEP_ENV = "AIRLOCK_RUNTIME_CONFINE_STEP";

/** The first item of the native step's spec (its version). */
export const NATIVE_CONFINE_MAGIC = "airlock-confine/1";

/** The built step of each architecture (`process.arch`), in base64. */
const BUILDS: Readonly<Record<string, { elf: string; compiler: string }>> = {
  x64: { elf: X64_ELF, compiler: X64_COMPILER },
  // Built and checked under qemu-aarch64-static only (no arm64 machine in
  // CI): its syscall numbers are the generic table's.
  arm64: { elf: ARM64_ELF, compiler: ARM64_COMPILER },
};

const decoded = new Map<string, Uint8Array>();

/**
 * The native step's bytes for an architecture, or `undefined` where airlock
 * has none (the runtime step confines there).
 *
 * @param arch `process.arch`.
 * @returns The static ELF.
 *
 * @example
 * ```ts
 * import { nativeConfineElf } from "./native_step.ts";
 * import assert from "node:assert/strict";
 *
 * const elf = nativeConfineElf("x64");
 * assert.deepEqual([...(elf ?? []).slice(0, 4)], [0x7f, 0x45, 0x4c, 0x46]);
 * assert.equal(nativeConfineElf("mips"), undefined);
 * ```
 */
export function nativeConfineElf(arch: string): Uint8Array | undefined {
  const build = BUILDS[arch];
  if (build === undefined) return undefined;
  let bytes = decoded.get(arch);
  if (bytes === undefined) {
    bytes = new Uint8Array(Buffer.from(build.elf, "base64"));
    decoded.set(arch, bytes);
  }
  return bytes;
}

/**
 * The argv of the native step for a spec: each part an item of its own
 * (see `native/confine.c` for the layout), so that no length or separator
 * inside a path can be misread. The forwarder of a forwarded network is
 * the runtime step's alone; the native step instead makes the network's
 * listening sockets and hands them to the native relay (`net`).
 *
 * @param program The step's path (inside the sandbox).
 * @param spec The spec, as `confineSpec()` builds it.
 * @param options `pdeathsig`: the step sets the worker's parent-death
 *   signal (SIGKILL) itself, for a parent outside its pid namespace
 *   (bubblewrap around a worker in the shared one): no `setpriv` between.
 *   `net`: the forwarded network's listeners and the relay's socket (as
 *   the sandbox shows it), which the step hands over.
 * @returns The argv.
 * @throws {RangeError} when the spec has a forwarder, or an environment
 *   change's name is empty or holds `=`.
 *
 * @example
 * ```ts
 * import { nativeConfineArgv } from "./native_step.ts";
 * import assert from "node:assert/strict";
 *
 * const argv = nativeConfineArgv("/dev/airlock-confine", {
 *   v: 1,
 *   cwd: "/app",
 *   landlock: null,
 *   seccomp: "",
 *   argv: ["/usr/bin/bun", "main.ts"],
 *   env: { DENO_DIR: null, A: "1" },
 * });
 * assert.deepEqual(argv, [
 *   "/dev/airlock-confine", "airlock-confine/1", "/app", "-", "0", "0", "-",
 *   "2", "DENO_DIR", "A=1", "--", "/usr/bin/bun", "main.ts",
 * ]);
 * const dies = nativeConfineArgv("/dev/airlock-confine", {
 *   v: 1, cwd: "/app", landlock: null, seccomp: "", argv: ["/bin/true"], env: {},
 * }, { pdeathsig: true });
 * assert.deepEqual(dies.slice(0, 4), [
 *   "/dev/airlock-confine", "airlock-confine/1", "--pdeathsig", "/app",
 * ]);
 * ```
 */
export function nativeConfineArgv(
  program: string,
  spec: ConfineSpec,
  options: {
    pdeathsig?: boolean;
    net?: {
      readonly socket: string;
      readonly listeners: readonly { address: string; port: number }[];
    };
  } = {},
): string[] {
  if (spec.forwarder !== undefined) {
    throw new RangeError(
      "Cannot encode the native confine step: it starts no network forwarder (the runtime step does)",
    );
  }
  const argv = [
    program,
    NATIVE_CONFINE_MAGIC,
    ...(options.pdeathsig === true ? ["--pdeathsig"] : []),
    spec.cwd,
  ];
  const ruleset = spec.landlock;
  if (ruleset === null) argv.push("-", "0", "0");
  else {
    argv.push(
      `${ruleset.abi},${ruleset.handledFs},${ruleset.handledNet},${ruleset.scoped}`,
      String(ruleset.paths.length),
    );
    for (const rule of ruleset.paths) {
      const flags = (rule.exact === true ? 1 : 0) |
        (rule.required === true ? 2 : 0);
      argv.push(`${rule.access},${flags}`, rule.path);
    }
    argv.push(String(ruleset.ports.length));
    for (const rule of ruleset.ports) argv.push(`${rule.port},${rule.access}`);
  }
  argv.push(
    spec.seccomp === ""
      ? "-"
      : Buffer.from(spec.seccomp, "base64").toString("hex"),
  );
  const changes = Object.entries(spec.env);
  argv.push(String(changes.length));
  for (const [name, value] of changes) {
    if (name === "" || name.includes("=")) {
      throw new RangeError(
        `Cannot encode the native confine step: invalid variable name ${
          JSON.stringify(name)
        }`,
      );
    }
    argv.push(value === null ? name : `${name}=${value}`);
  }
  const net = options.net;
  if (net !== undefined) {
    argv.push("net", net.socket, String(net.listeners.length));
    for (const listener of net.listeners) {
      const hex = addressHex(listener.address);
      if (hex === undefined) {
        throw new RangeError(
          `Cannot encode the native confine step: a listener on ${
            JSON.stringify(listener.address)
          } is not an address`,
        );
      }
      argv.push(`${hex},${listener.port}`);
    }
  }
  argv.push("--", ...spec.argv);
  return argv;
}

/**
 * The compiler each architecture's bytes were built with (for the test
 * that rebuilds them).
 *
 * @param arch `process.arch`.
 * @returns The compiler's version line, or `undefined`.
 */
export function nativeConfineCompiler(arch: string): string | undefined {
  return BUILDS[arch]?.compiler;
}
