/**
 * How a sandbox holds `host:port` grants: which workers get the forwarded
 * network, what bubblewrap binds for it, and the forwarder's command line.
 * Pure functions; the broker itself is in broker.ts, the decision to use
 * it in the sandbox's plan.
 *
 * @module
 */

import { fileURLToPath } from "../../node_builtins.ts";
import type { ResolvedPermissions } from "../../permissions.ts";
import type { NetBroker } from "./broker.ts";
import { type NetLayout, netLayout, sandboxLocalAddresses } from "./targets.ts";

/** Where the broker's socket appears inside the sandbox. */
export const NET_SOCKET_IN_SANDBOX = "/run/airlock/net.sock";

/**
 * The forwarded network a worker's grants ask for: `undefined` when `net`
 * grants nothing (loopback only) or everything (`net: true`: the host's
 * network, shared); otherwise the layout of its `host:port` scopes, or why
 * a scope cannot be held by host and port.
 *
 * @param permissions The worker's resolved permissions.
 * @returns The layout, `{ problem }`, or `undefined`.
 *
 * @example
 * ```ts
 * import { resolvePermissions } from "../../permissions.ts";
 * import { forwardedNet } from "./sandbox_net.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(forwardedNet(resolvePermissions({ net: true }, "/")), undefined);
 * const net = forwardedNet(resolvePermissions({ net: ["db:5432"] }, "/"));
 * assert.ok(net !== undefined && "listeners" in net);
 * ```
 */
export function forwardedNet(
  permissions: ResolvedPermissions,
): NetLayout | { readonly problem: string } | undefined {
  if (permissions.all) return undefined;
  const net = permissions.net;
  if (net === true || net.length === 0) return undefined;
  return netLayout(net);
}

/**
 * bubblewrap's arguments for a worker's forwarded network, besides
 * `--unshare-net`: the broker's hosts and nsswitch files over the system's,
 * its socket at {@linkcode NET_SOCKET_IN_SANDBOX}, and the capabilities of
 * {@linkcode netStepCapabilities} (and `CAP_SETPCAP`, to drop them from the
 * bounding set) for the sandbox's first process: the confine step, which
 * sets up the listeners with them and drops every capability before the
 * worker runs.
 *
 * @param broker The worker's broker.
 * @param layout Its network.
 * @returns The arguments.
 */
export function netBwrapArgs(broker: NetBroker, layout: NetLayout): string[] {
  // Without --disable-userns then (see bwrapArgv()): its nested user
  // namespace would hold the capability away from the network namespace.
  const args = [
    "--ro-bind",
    broker.hostsFile,
    "/etc/hosts",
    "--ro-bind",
    broker.nsswitchFile,
    "/etc/nsswitch.conf",
    "--ro-bind",
    broker.socket,
    NET_SOCKET_IN_SANDBOX,
  ];
  const capabilities = netStepCapabilities(layout);
  if (capabilities.length > 0) {
    // CAP_SETPCAP lets the step drop the others from the bounding set: a
    // worker run by root would get them back at exec otherwise.
    for (const capability of [...capabilities, "CAP_SETPCAP"]) {
      args.push("--cap-add", capability);
    }
  }
  return args;
}

/** The runtime that runs the forwarder (the confine step's). */
export interface ForwarderRunner {
  /** Which runtime. */
  readonly runtime: "deno" | "bun";
  /** Its binary (real path). */
  readonly binary: string;
}

/**
 * The forwarder's command line and environment, for the confine step to
 * start inside the sandbox before it confines itself.
 *
 * @param runner The runtime that runs it.
 * @param layout The worker's network.
 * @param denoDir Deno's cache directory (read-only in the sandbox), for a
 *   Deno forwarder.
 * @returns The argv and the whole environment.
 */
export function forwarderCommand(
  runner: ForwarderRunner,
  layout: NetLayout,
  denoDir: string | undefined,
): { argv: string[]; env: Record<string, string> } {
  const url = new URL(
    `./forwarder.${import.meta.url.endsWith(".js") ? "js" : "ts"}`,
    import.meta.url,
  );
  const entry = url.protocol === "file:" ? fileURLToPath(url) : url.href;
  const spec = JSON.stringify({
    socket: NET_SOCKET_IN_SANDBOX,
    listeners: layout.listeners,
  });
  if (runner.runtime === "deno") {
    return {
      argv: [
        runner.binary,
        "run",
        "-A",
        "--no-config",
        "--no-lock",
        "--quiet",
        entry,
        spec,
      ],
      env: {
        NO_COLOR: "1",
        DENO_NO_UPDATE_CHECK: "1",
        ...(denoDir === undefined ? {} : { DENO_DIR: denoDir }),
      },
    };
  }
  return {
    argv: [runner.binary, "--no-env-file", "--config=/dev/null", entry, spec],
    // As for the confine step (confine_wrapper.ts): its code is never read
    // from, or written to, a transpiler cache a worker could reach.
    env: { NO_COLOR: "1", BUN_RUNTIME_TRANSPILER_CACHE_PATH: "0" },
  };
}

/**
 * The capabilities the confine step needs in the user namespace that owns
 * the sandbox's network namespace to set up the listeners:
 * `CAP_NET_BIND_SERVICE` for a port below 1024, `CAP_NET_ADMIN` to add a
 * granted address outside loopback to the sandbox's loopback interface
 * ({@linkcode sandboxLocalAddresses}). With any, bubblewrap must not nest
 * another user namespace (`--disable-userns`, which would hold them away
 * from the network namespace); the seccomp filter refuses the worker every
 * new namespace (`unshare`, `setns`, `clone` with `CLONE_NEW*`, `clone3`)
 * all the same.
 *
 * @param layout The worker's network.
 * @returns The capabilities' names, none when the step needs none.
 *
 * @example
 * ```ts
 * import { netLayout } from "./targets.ts";
 * import { netStepCapabilities } from "./sandbox_net.ts";
 * import assert from "node:assert/strict";
 *
 * const layout = netLayout(["db:5432", "10.0.0.5:443"]);
 * assert.ok("listeners" in layout);
 * assert.deepEqual(netStepCapabilities(layout), [
 *   "CAP_NET_BIND_SERVICE",
 *   "CAP_NET_ADMIN",
 * ]);
 * ```
 */
export function netStepCapabilities(layout: NetLayout): string[] {
  const capabilities: string[] = [];
  if (layout.listeners.some((listener) => listener.port < 1024)) {
    capabilities.push("CAP_NET_BIND_SERVICE");
  }
  if (sandboxLocalAddresses(layout).length > 0) {
    capabilities.push("CAP_NET_ADMIN");
  }
  return capabilities;
}
