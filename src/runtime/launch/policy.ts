/**
 * Whether a worker runs in the OS sandbox: a pure decision from the
 * runtime, the `sandbox` option, the permissions and what this machine has.
 *
 * @module
 */

import type { ResolvedPermissions } from "../permissions.ts";
import type { SandboxMode } from "./types.ts";

/** Options of {@linkcode sandboxDecision}. */
export interface SandboxDecisionOptions {
  /** The worker's runtime, or `"command"` for a user's command (no permission model of its own, like Bun). */
  runtime: "deno" | "bun" | "command";
  /** The `sandbox` option, resolved. */
  sandbox: SandboxMode;
  /** The `permissions` option, resolved. */
  permissions: ResolvedPermissions;
  /** The bubblewrap binary, or `undefined` when none was found (or it is unusable). */
  bwrap: string | undefined;
  /**
   * Whether Landlock can confine the worker alone where bubblewrap is
   * missing, and why not (see `confine/wrapper.ts`); `refused` when it is
   * here but was refused for safety or failed a check (never a machine
   * without it). Omitted: Landlock is not considered.
   */
  landlock?: {
    readonly alone: boolean;
    readonly reason: string;
    readonly refused?: boolean;
  };
  /** Why bubblewrap, though installed, cannot run here (its probe failed). */
  bwrapUnusable?: string;
  /** The platform (`process.platform`), e.g. `"linux"`. */
  platform: string;
}

/**
 * Whether to run a worker in the OS sandbox ({@linkcode SandboxDecision}
 * `use`, with the reason), or why it cannot start (`error`).
 */
export type SandboxDecision =
  | { readonly use: boolean; readonly reason: string }
  | {
    /** Why the worker cannot start, as a message detail. */
    readonly error: string;
    /** What cannot be honoured: `"sandbox"` (the `sandbox` option) or `"permissions"`. */
    readonly permission: "sandbox" | "permissions";
  };

/**
 * Decides whether a worker runs in the OS sandbox. The rules:
 *
 * - `permissions: "all"`: never sandboxed; `sandbox: "os"` with it is an
 *   error (the two contradict each other).
 * - `sandbox: "os"`: sandboxed, or an error where the sandbox cannot be had
 *   (not Linux, or neither bubblewrap nor Landlock).
 * - A backend that exists but was refused or failed a check (Landlock whose
 *   confine step lies under a worker's write grant, or whose probe failed)
 *   where bubblewrap cannot confine alone: an error under `"auto"` and
 *   `"os"`, for every runtime, naming the cause and the fix. Only
 *   `sandbox: "none"` or `permissions.enforce: "best-effort"` opt out.
 *   (Without this, a Deno worker under `"auto"` would silently fall back to
 *   Deno's flags.)
 * - `sandbox: "auto"` (the default): sandboxed whenever the sandbox is
 *   available, on both runtimes (Deno's flags do not stop `import()` from
 *   reading files, nor native code and subprocesses).
 * - Bun without the sandbox (`sandbox: "none"`, or `"auto"` where bubblewrap
 *   is unavailable): Bun has no permission model, so nothing would enforce
 *   the permissions, not even the default "nothing granted". That is an
 *   error unless `permissions.enforce` is `"best-effort"`.
 * - Deno without the sandbox (`"none"`, or `"auto"` where it is
 *   unavailable: macOS, Windows, Linux without either backend): Deno's flags
 *   enforce the permissions on most of JavaScript; imports, native code and
 *   subprocesses are not confined.
 *
 * @param options The runtime, the options, and what this machine has.
 * @returns `{ use, reason }`, or `{ error }` with a message detail that says
 * how to fix it (no leading "Cannot start worker", no final period).
 *
 * @example Bun on a machine with bubblewrap
 * ```ts
 * import { resolvePermissions } from "../permissions.ts";
 * import { sandboxDecision } from "./policy.ts";
 * import assert from "node:assert/strict";
 *
 * const decision = sandboxDecision({
 *   runtime: "bun",
 *   sandbox: "auto",
 *   permissions: resolvePermissions(undefined, "/app"),
 *   bwrap: "/usr/bin/bwrap",
 *   platform: "linux",
 * });
 * assert.ok("use" in decision && decision.use);
 * ```
 *
 * @example Bun on macOS, nothing granted, strict
 * ```ts
 * import { resolvePermissions } from "../permissions.ts";
 * import { sandboxDecision } from "./policy.ts";
 * import assert from "node:assert/strict";
 *
 * const decision = sandboxDecision({
 *   runtime: "bun",
 *   sandbox: "auto",
 *   permissions: resolvePermissions(undefined, "/app"),
 *   bwrap: undefined,
 *   platform: "darwin",
 * });
 * assert.ok("error" in decision);
 * ```
 */
export function sandboxDecision(
  options: SandboxDecisionOptions,
): SandboxDecision {
  const { runtime, sandbox, permissions, bwrap, platform, landlock } = options;
  const who = runtime === "command" ? "A command worker has" : "Bun has";
  const enforcer = runtime === "command" ? "the command" : "Bun";
  const unavailable = platform !== "linux"
    ? `the OS sandbox needs Linux (bubblewrap or Landlock), and this platform is "${platform}"`
    : bwrap === undefined && !landlock?.alone
    ? `${
      options.bwrapUnusable === undefined
        ? 'bubblewrap ("bwrap") was not found on PATH (install it, e.g. "apt-get install bubblewrap")'
        : `bubblewrap ("bwrap") cannot run here: ${options.bwrapUnusable}`
    }${
      landlock
        ? ` and Landlock cannot confine the worker alone: ${landlock.reason}`
        : ""
    }`
    : undefined;

  if (permissions.all) {
    if (sandbox === "os") {
      return {
        error:
          'sandbox "os" contradicts permissions "all", which grants everything; drop one of them',
        permission: "sandbox",
      };
    }
    return { use: false, reason: 'permissions "all" grants everything' };
  }

  // Landlock is here but refused (or failed its probe) and bubblewrap
  // cannot confine alone: never a silent fallback to weaker confinement.
  const refused = platform === "linux" && bwrap === undefined &&
      landlock?.refused === true && !landlock.alone
    ? `${
      options.bwrapUnusable === undefined
        ? 'bubblewrap ("bwrap") was not found on PATH'
        : `bubblewrap ("bwrap") cannot run here: ${options.bwrapUnusable}`
    }, and the Landlock backend, which this machine has, was refused: ${landlock.reason}`
    : undefined;
  if (
    refused !== undefined && sandbox !== "none" &&
    permissions.enforce !== "best-effort"
  ) {
    return {
      error: `the OS sandbox cannot confine this worker: ${refused}${
        runtime === "deno"
          ? " (Deno's flags alone would be weaker confinement)"
          : ""
      }; remove that cause, make bubblewrap usable (it confines alone), or opt out explicitly with ${
        runtime === "deno" ? 'sandbox "none" or ' : ""
      }permissions.enforce "best-effort"`,
      permission: "sandbox",
    };
  }

  if (sandbox === "os") {
    if (unavailable !== undefined) {
      return {
        error:
          `sandbox "os" was asked for but ${unavailable}; use sandbox "auto" to run without it where it is missing`,
        permission: "sandbox",
      };
    }
    return { use: true, reason: 'sandbox "os" was asked for' };
  }

  if (sandbox === "auto" && unavailable === undefined) {
    if (runtime !== "deno") {
      return {
        use: true,
        reason:
          `${who} no permission model: the OS sandbox enforces the permissions`,
      };
    }
    return {
      use: true,
      reason:
        "Deno's flags do not check every access (import() reads files without a read check; native code and subprocesses escape them): the OS sandbox confines the whole process",
    };
  }

  // No sandbox: "none", or "auto" where it is unavailable.
  const without = sandbox === "none"
    ? 'sandbox "none" turns off the OS sandbox'
    : unavailable ?? "the OS sandbox is unavailable";
  if (runtime === "deno") {
    return {
      use: false,
      reason:
        `Deno's flags enforce the permissions on JavaScript (${without}; native code and subprocesses are not confined)`,
    };
  }
  if (permissions.enforce === "best-effort") {
    return {
      use: false,
      reason:
        `permissions.enforce is "best-effort": ${enforcer} enforces no permissions and ${without}`,
    };
  }
  return {
    error:
      `${who} no permission model and ${without}, so nothing would enforce the permissions (not even the default of nothing granted); ${
        sandbox === "none"
          ? 'use sandbox "auto" on Linux with bubblewrap, '
          : "install bubblewrap, "
      }grant everything with permissions "all", or accept unenforced permissions with permissions.enforce "best-effort"`,
    permission: "permissions",
  };
}
