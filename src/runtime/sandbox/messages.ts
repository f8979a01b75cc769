/**
 * Every word the OS sandbox says about itself, in one table: why a worker
 * is (or is not) confined, why a backend cannot confine it here, and every
 * refusal, each with its fix. {@linkcode sandboxPlan} and the builders
 * take their messages from here, so a wording changes in one place and a
 * reader sees every refusal at once. Details, not whole messages: the
 * caller's error adds `Cannot start worker "…":` before them. No final
 * periods.
 *
 * @module
 */

/** The way out of a network refusal: a weaker hold, asked for by name. */
const NET_WEAKER =
  'or accept the weaker hold (the host\'s network, by port under Landlock) with permissions.enforce "best-effort"';

/** Who has no permission model of its own: Bun, or a user's `command`. */
type Unmodelled = "bun" | "command";

/**
 * The sandbox's messages, by name. Functions take what the words need.
 *
 * @example
 * ```ts
 * import { SANDBOX_MESSAGES } from "./messages.ts";
 * import assert from "node:assert/strict";
 *
 * assert.match(SANDBOX_MESSAGES.notLinux("darwin"), /"darwin"/);
 * ```
 */
export const SANDBOX_MESSAGES = {
  // --- Why a backend is unavailable here (host facts). ---
  notLinux: (platform: string): string =>
    `the OS sandbox needs Linux (bubblewrap or Landlock), and this platform is "${platform}"`,
  bwrapNotFound: (): string =>
    'bubblewrap ("bwrap") was not found on PATH (install it, e.g. "apt-get install bubblewrap")',
  bwrapNotFoundShort: (): string =>
    'bubblewrap ("bwrap") was not found on PATH',
  bwrapCannotRun: (reason: string): string =>
    `bubblewrap ("bwrap") cannot run here: ${reason}`,
  landlockNotAlone: (reason: string): string =>
    ` and Landlock cannot confine the worker alone: ${reason}`,
  compiledNoStepRuntime: (): string =>
    "a compiled program has no runtime to run the confine step",
  noSyscallTable: (): string =>
    "the seccomp filter has no system call table for this architecture",
  stepNeedsDenoDir: (): string =>
    "the confine step runs on Deno, which needs a cache directory, and the parent has none (set DENO_DIR or HOME)",
  stepUnderWriteGrant: (path: string, grant: string): string =>
    `the confine step's ${JSON.stringify(path)} lies under ${
      JSON.stringify(grant)
    }, which a worker may write; keep write grants away from airlock, the runtime and its caches`,
  stepProbeFailed: (why: string): string =>
    `the confine step's probe failed: ${why}`,
  stepNeedsLinux: (platform: string): string =>
    `Landlock and seccomp need Linux, and this platform is "${platform}"`,
  noLandlock: (): string =>
    "the kernel has no Landlock (Linux 5.13 or later with landlock in its lsm= list)",
  noSeccomp: (): string => "the kernel does not offer seccomp filters",
  landlockGaps: (
    abi: number,
    gaps: readonly { feature: string; abi: number }[],
  ): string =>
    `the kernel's Landlock ABI ${abi} lacks ${
      gaps.map((gap) => `${gap.feature} (ABI ${gap.abi})`).join(" and ")
    }`,

  // --- Why a worker is confined, or not (the plan's reason). ---
  launcher: (): string =>
    "the worker runs through a launcher: the sandbox is the remote side's job (bubblewrap's mounts would name this machine's paths)",
  allGranted: (): string => 'permissions "all" grants everything',
  osAskedFor: (): string => 'sandbox "os" was asked for',
  unmodelledConfined: (runtime: Unmodelled): string =>
    `${
      runtime === "command" ? "A command worker has" : "Bun has"
    } no permission model: the OS sandbox enforces the permissions`,
  denoConfined: (): string =>
    "Deno's flags do not check every access (import() reads files without a read check; native code and subprocesses escape them): the OS sandbox confines the whole process",
  sandboxNoneOff: (): string => 'sandbox "none" turns off the OS sandbox',
  sandboxUnavailable: (): string => "the OS sandbox is unavailable",
  denoFlagsOnly: (without: string): string =>
    `Deno's flags enforce the permissions on JavaScript (${without}; native code and subprocesses are not confined)`,
  bestEffortUnconfined: (runtime: Unmodelled, without: string): string =>
    `permissions.enforce is "best-effort": ${
      runtime === "command" ? "the command" : "Bun"
    } enforces no permissions and ${without}`,
  bestEffortLandlock: (reason: string): string =>
    `permissions.enforce is "best-effort" and bubblewrap cannot run: Landlock confines the worker as far as it goes (${reason})`,

  // --- Refusals (a PermissionError's detail). ---
  osContradictsAll: (): string =>
    'sandbox "os" contradicts permissions "all", which grants everything; drop one of them',
  backendRefused: (
    runtime: "deno" | Unmodelled,
    bwrap: string,
    reason: string,
  ): string =>
    `the OS sandbox cannot confine this worker: ${bwrap}, and the Landlock backend, which this machine has, was refused: ${reason}${
      runtime === "deno"
        ? " (Deno's flags alone would be weaker confinement)"
        : ""
    }; remove that cause, make bubblewrap usable (it confines alone), or opt out explicitly with ${
      runtime === "deno" ? 'sandbox "none" or ' : ""
    }permissions.enforce "best-effort"`,
  osUnavailable: (unavailable: string): string =>
    `sandbox "os" was asked for but ${unavailable}; use sandbox "auto" to run without it where it is missing`,
  nothingEnforces: (
    runtime: Unmodelled,
    without: string,
    sandboxNone: boolean,
  ): string =>
    `${
      runtime === "command" ? "A command worker has" : "Bun has"
    } no permission model and ${without}, so nothing would enforce the permissions (not even the default of nothing granted); ${
      sandboxNone
        ? 'use sandbox "auto" on Linux with bubblewrap, '
        : "install bubblewrap, "
    }grant everything with permissions "all", or accept unenforced permissions with permissions.enforce "best-effort"`,
  compiledDenoUnenforced: (): string =>
    'a program made by deno compile cannot pass Deno\'s permission flags to its workers, which take the permissions it was compiled with; use the OS sandbox (Linux with bubblewrap), grant everything with permissions "all", or accept the compiled-in permissions with permissions.enforce "best-effort"',
  grantIsLink: (
    kind: string,
    path: string,
    real: string,
    planted: string | undefined,
  ): string =>
    `permissions.${kind} "${path}" is a link to "${real}"${
      planted === undefined
        ? ", which would expose the root or home directory"
        : ` inside "${planted}", where a worker may write and could have made it`
    }; grant the real path instead`,
  metadataNeedsBwrap: (why: string): string =>
    `permissions.metadata "strict" cannot be enforced here: without bubblewrap (${why}) the sandbox is Landlock alone, where a worker can still change the metadata of a file it may read and owns through a descriptor (fchmod); make bubblewrap usable, or accept that hold with permissions.metadata "best-effort"`,
  metadataAsRoot: (): string =>
    `permissions.metadata "strict" cannot be enforced for a worker run as root (the parent's effective uid is 0, or cannot be read): bubblewrap binds the host's /dev/null, /dev/zero, /dev/full, /dev/random, /dev/urandom and /dev/tty writable and /proc's entries are the host's, so the worker could change their mode, owner or times (fchmod on a descriptor) for the whole host; run the parent as an ordinary user, or accept that hold with permissions.metadata "best-effort"`,
  grantMissing: (kind: string, path: string, planted: string): string =>
    `permissions.${kind} "${path}" does not exist, and it lies inside "${planted}", where a worker may write and could make it a link; create it before the worker starts`,
  grantNeedsStep: (path: string, reason: string): string =>
    `permissions "${path}" lies where a worker may write, so bubblewrap must bind it from a descriptor opened without following links, which the confine step opens, and it cannot run here: ${reason}; grant a path no worker may write`,
  bwrapSeccomp: (detail: string): string =>
    `cannot install the seccomp filter in bubblewrap: ${detail}`,
  bwrapSeccompArch: (arch: string): string =>
    `no system call table for the architecture "${arch}"`,
  bwrapSeccompShell: (shell: string): string => `${shell} is missing`,
  nativeStepArch: (arch: string): string =>
    `airlock has no native confine step for the architecture "${arch}"`,

  // --- Network grants by host and port (net/). ---
  netNotByHost: (scopes: readonly string[]): string =>
    `permissions.net ${
      JSON.stringify(scopes)
    } cannot be enforced by host here: without bubblewrap the sandbox is Landlock alone, which holds TCP by port on any host; make bubblewrap usable (it gives the worker a network of its own), grant net: true for the whole network, ${NET_WEAKER}`,
  netScope: (problem: string): string =>
    `permissions.net cannot be enforced by host and port: ${problem}; or grant net: true for the whole network, ${NET_WEAKER}`,
  netNeedsStep: (scopes: readonly string[]): string =>
    `permissions.net ${
      JSON.stringify(scopes)
    } needs the confine step inside bubblewrap to start its network forwarder, and it cannot run here (a compiled program has no runtime to run it, or this kernel has neither Landlock nor seccomp); grant net: true for the whole network, ${NET_WEAKER}`,
  netNeedsLandlock: (scopes: readonly string[]): string =>
    `permissions.net ${
      JSON.stringify(scopes)
    } needs Landlock in the confine step: its network forwarder runs outside the worker's seccomp filter, and without Landlock's ptrace and signal scoping the worker could take the forwarder over (this kernel has seccomp but no usable Landlock); run on Linux 6.7 or newer with Landlock enabled, grant net: true for the whole network, ${NET_WEAKER}`,
  netBroker: (detail: string): string =>
    `cannot start the network broker: ${detail}`,
  pidNamespaceShell: (detail: string): string =>
    `cannot join the pid namespace the parent's workers share: ${detail}`,
} as const;
