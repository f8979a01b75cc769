/**
 * The shared types of the OS sandbox that the rest of airlock names: the
 * `sandbox` option and the backends that confine a worker. The only module
 * of src/runtime/sandbox/ loaded when airlock is imported (option
 * validation needs {@linkcode SANDBOX_MODES}); the rest loads on the first
 * start. Private to airlock.
 *
 * @module
 */

/**
 * The `sandbox` option: `"os"` requires the OS sandbox (fails where it
 * cannot be had), `"none"` never uses it, `"auto"` uses it wherever it is
 * available. The one definition of the union: options.ts imports it.
 */
export type SandboxMode = "none" | "os" | "auto";

/** One OS sandbox backend: bubblewrap's namespaces, or Landlock with seccomp. */
export type SandboxBackend = "bwrap" | "landlock";

/** The values of {@linkcode SandboxMode}, for validation. */
export const SANDBOX_MODES: readonly SandboxMode[] = ["none", "os", "auto"];
