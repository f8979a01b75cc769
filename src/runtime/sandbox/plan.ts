/**
 * The one decision of the OS sandbox: from a worker's resolved options and
 * what this machine has (the host facts, gathered by `facts.ts`), which
 * backends confine the worker and how, or why it cannot start. Pure: no
 * I/O, no globals, so every case is a row of one table test
 * (tests/runtime/sandbox_plan_test.ts). The builders (`wrappers.ts`,
 * `bwrap.ts`, `confine_wrapper.ts`) turn the plan into argv, mounts,
 * Landlock rules and the seccomp filter; they decide nothing.
 *
 * @module
 */

import { PermissionError } from "../../errors.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import type { ConfineRunner, ConfineSupport } from "./confine_command.ts";
import { landlockGaps } from "./landlock.ts";
import { covers } from "./paths.ts";
import { SANDBOX_MESSAGES as SAYS } from "./messages.ts";
import type { SandboxBackend, SandboxMode } from "./types.ts";
import { forwardedNet } from "./net/sandbox_net.ts";
import type { NetLayout } from "./net/targets.ts";

/** What {@linkcode sandboxPlan} needs of a worker's resolved options. */
export interface SandboxRequest {
  /** The worker's display name, for the error. */
  module: string;
  /**
   * The runtime whose confinement rules apply: `"command"` for a user's
   * command, and `"bun"` for a `deno compile`d program (neither can take
   * Deno's flags: only the sandbox confines them).
   */
  runtime: "deno" | "bun" | "command";
  /** The `sandbox` option, resolved. */
  sandbox: SandboxMode;
  /** The `permissions` option, resolved. */
  permissions: ResolvedPermissions;
  /** Whether the worker runs on this machine (no launcher). */
  local: boolean;
  /** Whether the worker is a `deno compile`d program (self-exec), for the message. */
  compiledDeno: boolean;
  /**
   * Whether the worker may join the pid namespace its parent's other
   * workers share (see {@linkcode sharesPidNamespace}): `false` for the code
   * cache's warm-up start, which shares no data with them.
   *
   * @default {true}
   */
  sharePids?: boolean;
}

/**
 * What is known of bubblewrap here: its path when it can run, why it
 * cannot (installed, but its probe failed: user namespaces forbidden), or
 * `undefined` when it was not found (or not looked up).
 */
export type BwrapFact =
  | { readonly path: string }
  | { readonly unusable: string }
  | undefined;

/**
 * What is known of the confine step (Landlock and seccomp, applied by
 * `workers/confine.ts` before it execs the worker): the runtime that runs
 * it, its own variables and what the kernel offers; or why it cannot run,
 * and whether that is a refusal (its code or runtime lies under a worker's
 * write grant, or its probe failed) rather than an absence (no runtime, an
 * unknown architecture).
 */
export type ConfineStepFact =
  | {
    readonly runner: ConfineRunner;
    readonly stepEnv: Readonly<Record<string, string>>;
    readonly support: Readonly<Pick<ConfineSupport, "landlockAbi" | "seccomp">>;
  }
  | { readonly unavailable: string; readonly refused: boolean };

/** What this machine has, as far as the sandbox is concerned. */
export interface HostFacts {
  /** `process.platform`, e.g. `"linux"`. */
  platform: string;
  /** bubblewrap. */
  bwrap: BwrapFact;
  /** The confine step; `undefined` when not looked at (not Linux, or nothing to confine). */
  confineStep: ConfineStepFact | undefined;
  /**
   * Whether airlock has a native confine step for this machine's
   * architecture (`native_step.ts`), and it may be used (the
   * `AIRLOCK_RUNTIME_CONFINE_STEP=1` switch, for tests and measurements,
   * says no).
   *
   * @default {false}
   */
  nativeStep?: boolean;
  /**
   * Whether the worker runs as root (the parent's effective uid is 0, or
   * cannot be told): bubblewrap then binds the host's device nodes
   * (`/dev/null` …) writable, and `/proc`'s entries are the host's, so
   * such a worker changes their mode, owner and times through a
   * descriptor. Looked at only for `permissions.metadata: "strict"`.
   *
   * @default {false}
   */
  root?: boolean;
}

/** The confine step as a plan names it: how to run it, and what it installs. */
export interface PlannedStep {
  /** The runtime that runs the step. */
  readonly runner: ConfineRunner;
  /** The step's own variables. */
  readonly stepEnv: Readonly<Record<string, string>>;
  /** What the kernel offers: the step applies Landlock when `landlockAbi > 0`, and always the seccomp filter. */
  readonly support: Readonly<Pick<ConfineSupport, "landlockAbi" | "seccomp">>;
  /**
   * Which program applies it: `"native"`, airlock's static confine program
   * (an `execve`, no runtime start), where bubblewrap runs around it (it
   * creates the program from bytes the parent hands it; a forwarded
   * network's listening sockets go to the native relay); else
   * `"runtime"`, `workers/confine.ts` on the runner (it starts the
   * JavaScript forwarder, and it runs without bubblewrap).
   */
  readonly program: "native" | "runtime";
}

/**
 * What the sandbox does with one worker: nothing (with the reason), or the
 * backends that confine it. The seccomp filter is always installed when the
 * worker is confined: by the confine step when there is one, else by
 * bubblewrap (`--seccomp`).
 */
export type SandboxPlan =
  | { readonly confined: false; readonly reason: string }
  | {
    readonly confined: true;
    /** Why, in words. */
    readonly reason: string;
    /** The backends, outermost first (as `WorkerCommand.sandboxes`). */
    readonly backends: readonly SandboxBackend[];
    /** The bubblewrap binary when bubblewrap confines the worker. */
    readonly bwrap: string | undefined;
    /** The confine step when it runs (inside bubblewrap when both do). */
    readonly step: PlannedStep | undefined;
    /** Who installs the seccomp filter. */
    readonly seccomp: "step" | "bwrap";
    /**
     * The forwarded network of `host:port` grants under bubblewrap (a
     * network namespace of its own, the parent's broker, and the native
     * relay the native step hands its listening sockets to, or the
     * forwarder the runtime step starts), or `undefined`: no `net` scope (loopback only),
     * `net: true` (the host's network), or a weaker hold accepted with
     * `enforce: "best-effort"`.
     */
    readonly net: NetLayout | undefined;
    /**
     * Under bubblewrap, whether the worker has a pid namespace of its own
     * (it is pid 2 there) or joins the one its parent's other workers share
     * (distinct pids: see {@linkcode sharesPidNamespace}); `undefined`
     * without bubblewrap (the worker keeps its host pid).
     */
    readonly pidNamespace: "own" | "shared" | undefined;
    /**
     * What kills the worker when the process around it dies (where the
     * launch has a parent-death guard at all): `"step"`, the native step
     * (`--pdeathsig`) in the shared pid namespace, inside bubblewrap, with
     * no `setpriv` between; else `"setpriv"`, inside bubblewrap in the
     * shared namespace (the runtime step's paths), around everything
     * elsewhere.
     */
    readonly parentDeath: "step" | "setpriv";
  };

/** What the confine step can do for these permissions. */
interface LandlockFit {
  /** Landlock and seccomp can be applied (as a second backend at least). */
  usable: boolean;
  /** The kernel has no Landlock but the step can install the seccomp filter. */
  seccompOnly: boolean;
  /** Landlock alone enforces every grant (no ABI gap). */
  alone: boolean;
  /** Why not usable or not alone; `""` when both. */
  reason: string;
  /** Refused for safety or failed a check, as opposed to missing. */
  refused: boolean;
}

function landlockFit(
  step: ConfineStepFact,
  permissions: ResolvedPermissions,
): LandlockFit {
  const no = { usable: false, seccompOnly: false, alone: false };
  if ("unavailable" in step) {
    return { ...no, reason: step.unavailable, refused: step.refused };
  }
  if (step.support.landlockAbi < 1) {
    return {
      ...no,
      seccompOnly: step.support.seccomp,
      reason: SAYS.noLandlock(),
      refused: false,
    };
  }
  if (!step.support.seccomp) {
    return { ...no, reason: SAYS.noSeccomp(), refused: false };
  }
  const gaps = landlockGaps(permissions, step.support.landlockAbi);
  return {
    usable: true,
    seccompOnly: false,
    alone: gaps.length === 0,
    reason: gaps.length === 0
      ? ""
      : SAYS.landlockGaps(step.support.landlockAbi, gaps),
    refused: false,
  };
}

/** Whether {@linkcode sandboxPlan} can use host facts for this request: the facts to gather. */
export function needsHostFacts(request: SandboxRequest): boolean {
  return request.local && !request.permissions.all &&
    request.sandbox !== "none";
}

/**
 * Decides how a worker is confined. The rules, in order:
 *
 * - Through a launcher: not here (the remote side's job).
 * - `permissions: "all"`: never sandboxed; `sandbox: "os"` with it is an
 *   error (the two contradict each other).
 * - A backend that exists but was refused or failed a check (Landlock whose
 *   confine step lies under a worker's write grant, or whose probe failed)
 *   where bubblewrap cannot confine alone: an error under `"auto"` and
 *   `"os"`, for every runtime, naming the cause and the fix. Only
 *   `sandbox: "none"` or `permissions.enforce: "best-effort"` opt out
 *   (never a silent fall back to Deno's flags).
 * - `sandbox: "os"`: sandboxed, or an error where the sandbox cannot be had
 *   (not Linux, or neither bubblewrap nor Landlock alone).
 * - `sandbox: "auto"` (the default): sandboxed whenever the sandbox is
 *   available, on both runtimes (Deno's flags do not stop `import()` from
 *   reading files, nor native code and subprocesses).
 * - Without the sandbox, Deno's flags enforce the permissions on
 *   JavaScript; Bun and a `command` have no permission model, so that is an
 *   error unless `permissions.enforce` is `"best-effort"`, and then Landlock
 *   confines them as far as it goes where it can be applied.
 *
 * When sandboxed, every backend available is used, innermost first:
 * Landlock (the confine step) inside bubblewrap. Where the kernel has no
 * Landlock, the step still installs the seccomp filter inside bubblewrap;
 * without a step, bubblewrap installs it.
 *
 * @param request The worker's resolved options.
 * @param facts What this machine has.
 * @returns The plan.
 * @throws {PermissionError} when the worker cannot start as asked
 *   (`permission` is `"sandbox"` or `"permissions"`).
 *
 * @example Bun on a machine with bubblewrap and Landlock
 * ```ts
 * import { resolvePermissions } from "../permissions.ts";
 * import { sandboxPlan } from "./plan.ts";
 * import assert from "node:assert/strict";
 *
 * const plan = sandboxPlan({
 *   module: "db.ts",
 *   runtime: "bun",
 *   sandbox: "auto",
 *   permissions: resolvePermissions(undefined, "/app"),
 *   local: true,
 *   compiledDeno: false,
 * }, {
 *   platform: "linux",
 *   bwrap: { path: "/usr/bin/bwrap" },
 *   confineStep: {
 *     runner: { runtime: "bun", binary: "/usr/bin/bun" },
 *     stepEnv: {},
 *     support: { landlockAbi: 6, seccomp: true },
 *   },
 * });
 * assert.ok(plan.confined);
 * assert.deepEqual(plan.backends, ["bwrap", "landlock"]);
 * ```
 *
 * @example Bun on macOS, nothing granted, strict
 * ```ts
 * import { PermissionError } from "@airlock/airlock";
 * import { resolvePermissions } from "../permissions.ts";
 * import { sandboxPlan } from "./plan.ts";
 * import assert from "node:assert/strict";
 *
 * assert.throws(() =>
 *   sandboxPlan({
 *     module: "db.ts",
 *     runtime: "bun",
 *     sandbox: "auto",
 *     permissions: resolvePermissions(undefined, "/app"),
 *     local: true,
 *     compiledDeno: false,
 *   }, { platform: "darwin", bwrap: undefined, confineStep: undefined }), PermissionError);
 * ```
 */
export function sandboxPlan(
  request: SandboxRequest,
  facts: HostFacts,
): SandboxPlan {
  if (!request.local) return { confined: false, reason: SAYS.launcher() };
  const { sandbox, permissions } = request;
  const offer = hostOffer(facts, permissions);
  if (permissions.all) {
    if (sandbox === "os") {
      return refuse(request, SAYS.osContradictsAll(), "sandbox");
    }
    return { confined: false, reason: SAYS.allGranted() };
  }
  refuseRefusedBackend(request, offer);
  const reason = sandboxReason(request, offer);
  return reason === undefined
    ? withoutSandbox(request, facts, offer)
    : sandboxed(request, facts, offer, reason);
}

/** What this machine offers a worker's permissions, and why the sandbox is unavailable if it is. */
interface HostOffer {
  linux: boolean;
  /** The bubblewrap binary when it can run. */
  bwrap: string | undefined;
  /** Why an installed bubblewrap cannot run. */
  bwrapUnusable: string | undefined;
  /** What the confine step can do, on Linux when it was looked at. */
  landlock: LandlockFit | undefined;
  /** Why the sandbox cannot be had (not Linux, neither backend confines alone). */
  unavailable: string | undefined;
}

function hostOffer(
  facts: HostFacts,
  permissions: ResolvedPermissions,
): HostOffer {
  const linux = facts.platform === "linux";
  const bwrap = facts.bwrap !== undefined && "path" in facts.bwrap
    ? facts.bwrap.path
    : undefined;
  const bwrapUnusable = facts.bwrap !== undefined && "unusable" in facts.bwrap
    ? facts.bwrap.unusable
    : undefined;
  const landlock = linux && facts.confineStep !== undefined
    ? landlockFit(facts.confineStep, permissions)
    : undefined;
  const unavailable = !linux
    ? SAYS.notLinux(facts.platform)
    : bwrap === undefined && !landlock?.alone
    ? `${
      bwrapUnusable === undefined
        ? SAYS.bwrapNotFound()
        : SAYS.bwrapCannotRun(bwrapUnusable)
    }${landlock ? SAYS.landlockNotAlone(landlock.reason) : ""}`
    : undefined;
  return { linux, bwrap, bwrapUnusable, landlock, unavailable };
}

/** Why bubblewrap is missing, as the shorter messages quote it. */
function bwrapMissing(offer: HostOffer): string {
  return offer.bwrapUnusable === undefined
    ? SAYS.bwrapNotFoundShort()
    : SAYS.bwrapCannotRun(offer.bwrapUnusable);
}

function refuse(
  request: SandboxRequest,
  detail: string,
  permission: "sandbox" | "permissions",
): never {
  throw new PermissionError(
    request.compiledDeno && permission === "permissions"
      ? SAYS.compiledDenoUnenforced()
      : detail,
    { module: request.module, permission },
  );
}

/**
 * Landlock is here but refused (or failed its probe) and bubblewrap cannot
 * confine alone: an error unless `sandbox: "none"` or best effort, never a
 * silent fallback to weaker confinement.
 */
function refuseRefusedBackend(request: SandboxRequest, offer: HostOffer): void {
  const { landlock } = offer;
  if (
    offer.linux && offer.bwrap === undefined && landlock?.refused === true &&
    !landlock.alone && request.sandbox !== "none" &&
    request.permissions.enforce !== "best-effort"
  ) {
    refuse(
      request,
      SAYS.backendRefused(
        request.runtime,
        bwrapMissing(offer),
        landlock.reason,
      ),
      "sandbox",
    );
  }
}

/**
 * Why the worker is sandboxed: `"os"` asked for it (an error where it is
 * unavailable), or `"auto"` where it is available; `undefined` for no
 * sandbox.
 */
function sandboxReason(
  request: SandboxRequest,
  offer: HostOffer,
): string | undefined {
  const { sandbox, runtime } = request;
  if (sandbox === "os") {
    if (offer.unavailable !== undefined) {
      return refuse(request, SAYS.osUnavailable(offer.unavailable), "sandbox");
    }
    return SAYS.osAskedFor();
  }
  if (sandbox === "auto" && offer.unavailable === undefined) {
    return runtime === "deno"
      ? SAYS.denoConfined()
      : SAYS.unmodelledConfined(runtime);
  }
  return undefined;
}

/**
 * No sandbox (`"none"`, or `"auto"` where it is unavailable): Deno's flags
 * for Deno; for Bun and a command an error unless best effort, and then
 * Landlock as far as it goes where bubblewrap cannot run.
 */
function withoutSandbox(
  request: SandboxRequest,
  facts: HostFacts,
  offer: HostOffer,
): SandboxPlan {
  const { runtime, sandbox, permissions } = request;
  const without = sandbox === "none"
    ? SAYS.sandboxNoneOff()
    : offer.unavailable ?? SAYS.sandboxUnavailable();
  if (runtime === "deno") {
    return { confined: false, reason: SAYS.denoFlagsOnly(without) };
  }
  if (permissions.enforce !== "best-effort") {
    return refuse(
      request,
      SAYS.nothingEnforces(runtime, without, sandbox === "none"),
      "permissions",
    );
  }
  // Best effort: Landlock as far as it goes, where bubblewrap cannot run
  // (an ABI gap kept it from confining alone), rather than nothing.
  if (
    sandbox !== "none" && offer.bwrap === undefined &&
    offer.landlock?.usable === true &&
    facts.confineStep !== undefined && "runner" in facts.confineStep
  ) {
    return confinedBy(
      SAYS.bestEffortLandlock(offer.landlock.reason),
      undefined,
      facts.confineStep,
      undefined,
      facts.nativeStep,
    );
  }
  return {
    confined: false,
    reason: SAYS.bestEffortUnconfined(runtime, without),
  };
}

/**
 * Sandboxed: every backend available, Landlock inside bubblewrap (a
 * Landlock domain may not mount). Without Landlock, the step still
 * installs the seccomp filter inside bubblewrap (unix sockets, ptrace,
 * io_uring…). `permissions.metadata: "strict"` needs bubblewrap, not as root.
 */
function sandboxed(
  request: SandboxRequest,
  facts: HostFacts,
  offer: HostOffer,
  reason: string,
): SandboxPlan {
  const { bwrap, landlock } = offer;
  const { permissions } = request;
  const step = facts.confineStep !== undefined &&
      "runner" in facts.confineStep &&
      (landlock?.usable === true ||
        (landlock?.seccompOnly === true && bwrap !== undefined))
    ? facts.confineStep
    : undefined;
  if (permissions.metadata === "strict" && bwrap === undefined) {
    return refuse(
      request,
      SAYS.metadataNeedsBwrap(bwrapMissing(offer)),
      "sandbox",
    );
  }
  if (permissions.metadata === "strict" && facts.root === true) {
    return refuse(request, SAYS.metadataAsRoot(), "sandbox");
  }
  return confinedBy(
    reason,
    bwrap,
    step,
    netHold(
      request,
      bwrap !== undefined,
      step !== undefined,
      step !== undefined && landlock?.usable === true,
    ),
    facts.nativeStep,
    request.sharePids === false ? undefined : permissions,
  );
}

/**
 * How a confined worker's `host:port` grants are held: forwarded where
 * bubblewrap and the confine step both run and the step applies Landlock
 * (the runtime step's forwarder runs outside the worker's seccomp filter,
 * so only Landlock's ptrace and signal scoping keep the worker from taking
 * it over through `/proc/<pid>/mem`; the native step's path has no such
 * process, but the rule is one for both) (each granted target, and
 * nothing else, for every process of the worker); elsewhere a strict
 * worker is refused (Landlock alone holds TCP by port on any host; a scope
 * without a port, a wildcard or a multicast address cannot be
 * forwarded), and `enforce: "best-effort"` accepts the weaker hold (the
 * host's network, by port under Landlock).
 *
 * @throws {PermissionError} (`permission: "net"`) naming the scope, what
 *   would hold instead, and the fixes.
 */
function netHold(
  request: SandboxRequest,
  bwrap: boolean,
  step: boolean,
  landlock: boolean,
): NetLayout | undefined {
  const wanted = forwardedNet(request.permissions);
  if (wanted === undefined) return undefined;
  if (request.permissions.enforce === "best-effort") {
    return bwrap && step && landlock && !("problem" in wanted)
      ? wanted
      : undefined;
  }
  const net = request.permissions.net;
  const scopes = net === true ? [] : net;
  const detail = !bwrap
    ? SAYS.netNotByHost(scopes)
    : "problem" in wanted
    ? SAYS.netScope(wanted.problem)
    : !step
    ? SAYS.netNeedsStep(scopes)
    : !landlock
    ? SAYS.netNeedsLandlock(scopes)
    : undefined;
  if (detail === undefined) return wanted as NetLayout;
  throw new PermissionError(detail, {
    module: request.module,
    permission: "net",
  });
}

/**
 * Whether a worker under bubblewrap joins the pid namespace its parent's
 * other sandboxed workers share, so that workers that open the same files
 * see distinct pids (LMDB takes its reader lock at byte offset = pid in
 * the lock file; every worker in a namespace of its own is pid 2). Only
 * where sharing it shows a worker nothing of its siblings: the confine
 * step applies Landlock with signal scoping (ABI 6), so the worker cannot
 * signal a process outside its own domain (every sibling is a domain of its
 * own), cannot trace one (Landlock's ptrace rule, and the seccomp filter),
 * and reads no `/proc/<pid>` but its own (its path rules); and no read or
 * write grant reaches into `/proc` (it would open the siblings' entries).
 * Otherwise the worker gets a pid namespace of its own, as before.
 *
 * @param permissions The worker's resolved permissions.
 * @param step The confine step the plan runs inside bubblewrap, if any.
 * @returns Whether it shares the namespace.
 *
 * @example
 * ```ts
 * import { resolvePermissions } from "../permissions.ts";
 * import { sharesPidNamespace } from "./plan.ts";
 * import assert from "node:assert/strict";
 *
 * const step = {
 *   runner: { runtime: "bun" as const, binary: "/usr/bin/bun" },
 *   stepEnv: {},
 *   support: { landlockAbi: 6, seccomp: true },
 * };
 * assert.equal(sharesPidNamespace(resolvePermissions({ read: ["/data"] }, "/"), step), true);
 * assert.equal(sharesPidNamespace(resolvePermissions({ read: true }, "/"), step), false);
 * assert.equal(sharesPidNamespace(resolvePermissions({}, "/"), undefined), false);
 * ```
 */
export function sharesPidNamespace(
  permissions: ResolvedPermissions,
  step: Pick<PlannedStep, "support"> | undefined,
): boolean {
  if (step === undefined || step.support.landlockAbi < 6) return false;
  const reachesProc = (scopes: ResolvedPermissions["read"]): boolean =>
    scopes === true ||
    scopes.some((path) => covers(path, "/proc") || covers("/proc", path));
  return !reachesProc(permissions.read) && !reachesProc(permissions.write);
}

function confinedBy(
  reason: string,
  bwrap: string | undefined,
  found: Omit<PlannedStep, "program"> | undefined,
  net: NetLayout | undefined,
  nativeStep: boolean | undefined,
  sharing?: ResolvedPermissions,
): SandboxPlan {
  const step: PlannedStep | undefined = found === undefined ? undefined : {
    ...found,
    program: bwrap !== undefined && nativeStep === true ? "native" : "runtime",
  };
  const backends: SandboxBackend[] = [];
  if (bwrap !== undefined) backends.push("bwrap");
  if (step !== undefined && step.support.landlockAbi > 0) {
    backends.push("landlock");
  }
  const pidNamespace = bwrap === undefined
    ? undefined
    // A forwarded network through the runtime step keeps a namespace of
    // its own: its forwarder runs beside the worker, outside the worker's
    // Landlock domain. The native step's hands its sockets out instead.
    : sharing !== undefined &&
        (net === undefined || step?.program === "native") &&
        sharesPidNamespace(sharing, step)
    ? "shared"
    : "own";
  return {
    confined: true,
    reason,
    backends,
    bwrap,
    step,
    seccomp: step === undefined ? "bwrap" : "step",
    net,
    pidNamespace,
    // One exec fewer per start: the native step sets the signal itself.
    parentDeath: pidNamespace === "shared" && step?.program === "native"
      ? "step"
      : "setpriv",
  };
}
