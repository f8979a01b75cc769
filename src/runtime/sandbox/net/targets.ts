/**
 * What a worker's `net` scopes mean inside a network namespace of its own:
 * pure functions from scopes to the targets the parent's broker may reach,
 * the loopback address each granted name gets inside the sandbox, the hosts
 * file that maps them, and the class of an address the broker resolved.
 *
 * See docs/permissions.md ("Network grants by host and port").
 *
 * @module
 */

/** One granted `host:port`, as the broker checks it. */
export interface NetTarget {
  /** The scope as granted, e.g. `"db.internal:5432"` or `"[::1]:5432"`. */
  readonly scope: string;
  /** The host: a name (lower case, no final dot) or an address (IPv6 without brackets). */
  readonly host: string;
  /** The TCP port, 1 to 65535. */
  readonly port: number;
  /** Which kind of address `host` is, or `"name"`. */
  readonly kind: "name" | "ipv4" | "ipv6";
}

/** Where the forwarder listens inside the sandbox for one target. */
export interface NetListener {
  /** The loopback address inside the sandbox, e.g. `"127.80.0.1"` or `"::1"`. */
  readonly address: string;
  /** The port (the target's). */
  readonly port: number;
  /** The target's scope, which the forwarder names to the broker. */
  readonly target: string;
}

/** The network a sandboxed worker with host scopes gets. */
export interface NetLayout {
  /** The granted targets, deduplicated. */
  readonly targets: readonly NetTarget[];
  /** The forwarder's listeners. */
  readonly listeners: readonly NetListener[];
  /** The sandbox's `/etc/hosts`. */
  readonly hosts: string;
}

/** The class of an IP address, for the broker's check. */
export type AddressClass =
  | "public"
  | "loopback"
  | "link-local"
  | "metadata"
  | "private"
  | "unspecified"
  | "multicast"
  | "reserved";

/**
 * The first loopback address handed to a granted name inside the sandbox:
 * names get `127.80.0.1`, `127.80.0.2`, … (a range no service uses by
 * default), skipping any address a scope names itself.
 */
export const NAME_ADDRESS_BASE: readonly [number, number] = [127, 80];

/** The sandbox's `/etc/nsswitch.conf`: names come from its hosts file only. */
export const SANDBOX_NSSWITCH = "hosts: files\nnetworks: files\n";

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/**
 * Parses one `net` scope into a target, or says why the sandbox cannot
 * enforce it by host and port.
 *
 * @param scope A scope that passed `netScopeProblem()`.
 * @returns The target, or `{ problem }` (a message detail).
 *
 * @example
 * ```ts
 * import { parseNetTarget } from "./targets.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(parseNetTarget("DB.internal:5432"), {
 *   scope: "DB.internal:5432", host: "db.internal", port: 5432, kind: "name",
 * });
 * assert.ok("problem" in parseNetTarget("example.com"));
 * ```
 */
export function parseNetTarget(
  scope: string,
): NetTarget | { readonly problem: string } {
  const match = /^(\[[0-9A-Fa-f:.]+\]|[^:[\]]*)(?::(\d+))?$/.exec(scope);
  const rawHost = match?.[1] ?? "";
  const rawPort = match?.[2];
  if (!match) return { problem: `"${scope}" is not a host:port` };
  if (rawPort === undefined) {
    return {
      problem:
        `"${scope}" names no port, and the sandbox forwards one port of one host per scope: name the port (e.g. "${scope}:5432")`,
    };
  }
  const port = Number(rawPort);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    return { problem: `"${scope}" needs a port from 1 to 65535` };
  }
  if (rawHost === "") {
    return {
      problem:
        `"${scope}" names a port on every host, which cannot be enforced by host: name the host`,
    };
  }
  if (rawHost.startsWith("*.")) {
    return {
      problem:
        `"${scope}" is a wildcard, and the sandbox maps each granted name to an address of its own: name each host`,
    };
  }
  if (rawHost.startsWith("[")) {
    const address = rawHost.slice(1, -1).toLowerCase();
    if (ipv6Words(address) === undefined) {
      return { problem: `"${scope}" is not a valid IPv6 address and port` };
    }
    return { scope, host: address, port, kind: "ipv6" };
  }
  if (IPV4.test(rawHost)) {
    if (ipv4Bytes(rawHost) === undefined) {
      return { problem: `"${scope}" is not a valid IPv4 address and port` };
    }
    return { scope, host: rawHost, port, kind: "ipv4" };
  }
  const host = rawHost.toLowerCase().replace(/\.$/, "");
  return { scope, host, port, kind: "name" };
}

/**
 * The network of a sandbox whose worker is granted these scopes: every
 * target, the forwarder's listeners and the hosts file; or why a scope
 * cannot be enforced there.
 *
 * - A name gets a loopback address of its own (`127.80.0.N`), in the hosts
 *   file, so libc's resolver, Deno and Bun find it without DNS; `localhost`
 *   is `127.0.0.1` and `::1`.
 * - An address (`127.0.0.1:5432`, `10.0.0.5:5432`, `[::1]:5432`) is
 *   listened on as it is: the client connects to it unchanged. One outside
 *   loopback is first added to the sandbox's own loopback interface by the
 *   confine step ({@linkcode sandboxLocalAddresses}); multicast,
 *   unspecified and IPv6 link-local addresses cannot be, and are refused.
 *
 * @param scopes The resolved `net` scopes.
 * @returns The layout, or `{ problem }` naming the first scope it cannot honour.
 *
 * @example
 * ```ts
 * import { netLayout } from "./targets.ts";
 * import assert from "node:assert/strict";
 *
 * const layout = netLayout(["db.internal:5432", "127.0.0.1:6379"]);
 * assert.ok("listeners" in layout);
 * assert.deepEqual(layout.listeners.map((l) => `${l.address}:${l.port}`), [
 *   "127.80.0.1:5432", "127.0.0.1:6379",
 * ]);
 * assert.match(layout.hosts, /^127\.80\.0\.1 db\.internal$/m);
 * ```
 */
export function netLayout(
  scopes: readonly string[],
): NetLayout | { readonly problem: string } {
  const targets: NetTarget[] = [];
  const seen = new Set<string>();
  for (const scope of scopes) {
    const target = parseNetTarget(scope);
    if ("problem" in target) return target;
    const key = `${target.host} ${target.port}`;
    if (seen.has(key)) continue;
    seen.add(key);
    if (target.kind !== "name") {
      const problem = localAddressProblem(target);
      if (problem !== undefined) return { problem };
    }
    targets.push(target);
  }
  const literal = new Set(
    targets.filter((t) => t.kind !== "name").map((t) => t.host),
  );
  const names = new Map<string, string[]>();
  let next = 1;
  const nameAddress = (): string => {
    while (true) {
      const address = `${NAME_ADDRESS_BASE[0]}.${NAME_ADDRESS_BASE[1]}.${
        next >> 8
      }.${next & 255}`;
      next++;
      if ((next & 255) === 0) next++;
      if (!literal.has(address)) return address;
    }
  };
  const listeners: NetListener[] = [];
  for (const target of targets) {
    if (target.kind !== "name") {
      listeners.push({
        address: target.host,
        port: target.port,
        target: target.scope,
      });
      continue;
    }
    let addresses = names.get(target.host);
    if (addresses === undefined) {
      addresses = target.host === "localhost"
        ? ["127.0.0.1", "::1"]
        : [nameAddress()];
      names.set(target.host, addresses);
    }
    for (const address of addresses) {
      listeners.push({ address, port: target.port, target: target.scope });
    }
  }
  const lines = ["127.0.0.1 localhost", "::1 localhost"];
  for (const [name, addresses] of names) {
    if (name === "localhost") continue;
    for (const address of addresses) lines.push(`${address} ${name}`);
  }
  return { targets, listeners, hosts: `${lines.join("\n")}\n` };
}

/**
 * Why an address scope cannot be listened on inside the sandbox, if it
 * cannot: a multicast or unspecified address is no one host, and an IPv6
 * link-local address belongs to an interface the sandbox does not have.
 */
function localAddressProblem(target: NetTarget): string | undefined {
  const kind = addressClass(target.host);
  if (kind === "multicast" || kind === "unspecified") {
    return `"${target.scope}" is a ${kind} address, not one host: grant the address or name of the host itself`;
  }
  const words = target.kind === "ipv6" ? ipv6Words(target.host) : undefined;
  if (words !== undefined && words.slice(0, 5).every((w) => w === 0)) {
    if (words[5] === 0xffff || (words[5] === 0 && !onLoopback(target.host))) {
      return `"${target.scope}" is an IPv4 address written as IPv6: grant the IPv4 address itself`;
    }
  }
  if (target.kind === "ipv6" && kind === "link-local") {
    return `"${target.scope}" is an IPv6 link-local address, which belongs to one interface of the host and cannot be forwarded: grant a host name or a routable address for it`;
  }
  return undefined;
}

/**
 * The addresses the confine step adds to the sandbox's loopback interface
 * before it listens (it needs `CAP_NET_ADMIN` there, which bubblewrap then
 * gives it and it drops before the worker runs): the granted addresses
 * outside loopback, so that a client connecting to `10.0.0.5:5432`
 * unchanged reaches the listener instead of finding no route.
 *
 * @param layout The worker's network.
 * @returns The addresses, each once.
 *
 * @example
 * ```ts
 * import { netLayout, sandboxLocalAddresses } from "./targets.ts";
 * import assert from "node:assert/strict";
 *
 * const layout = netLayout(["10.0.0.5:5432", "db:5432", "127.0.0.1:6379"]);
 * assert.ok("listeners" in layout);
 * assert.deepEqual(sandboxLocalAddresses(layout), ["10.0.0.5"]);
 * ```
 */
export function sandboxLocalAddresses(layout: NetLayout): string[] {
  const addresses = new Set<string>();
  for (const listener of layout.listeners) {
    if (!onLoopback(listener.address)) addresses.add(listener.address);
  }
  return [...addresses];
}

/**
 * Whether an address is on loopback as the sandbox's network namespace
 * starts (`127.0.0.0/8`, `::1`): the kernel's own test, which the
 * confine steps repeat to know which listener addresses to add first.
 *
 * @param address An IPv4 or IPv6 address.
 * @returns Whether it needs no adding.
 */
export function onLoopback(address: string): boolean {
  const v4 = ipv4Bytes(address);
  if (v4 !== undefined) return v4[0] === 127;
  const words = ipv6Words(address);
  return words !== undefined &&
    words.slice(0, 7).every((word) => word === 0) && words[7] === 1;
}

/**
 * The class of an IP address (IPv4, or IPv6 without brackets; an
 * IPv4-mapped IPv6 address is classed as its IPv4 address). The broker
 * connects a granted name only to a `"public"` or `"private"` address;
 * every other class only when the scope names the address literally (or
 * `localhost`, for loopback). `"metadata"` is a cloud platform's metadata
 * or host endpoint outside link-local, which a worker's DNS answer must not
 * reach through a granted name: AWS's IPv6 `fd00:ec2::254`, Alibaba
 * Cloud's `100.100.100.200` and Azure's `168.63.129.16` (the link-local
 * `169.254.169.254` of every cloud is `"link-local"`).
 *
 * @param address The address.
 * @returns Its class; `"reserved"` for anything not parseable.
 *
 * @example
 * ```ts
 * import { addressClass } from "./targets.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(addressClass("169.254.169.254"), "link-local");
 * assert.equal(addressClass("10.0.0.5"), "private");
 * assert.equal(addressClass("fd00:ec2::254"), "metadata");
 * assert.equal(addressClass("::ffff:127.0.0.1"), "loopback");
 * assert.equal(addressClass("93.184.215.14"), "public");
 * ```
 */
export function addressClass(address: string): AddressClass {
  const v4 = ipv4Bytes(address);
  if (v4 !== undefined) return ipv4Class(v4);
  const words = ipv6Words(address);
  if (words === undefined) return "reserved";
  const [w0 = 0, w1 = 0, w2 = 0, w3 = 0, w4 = 0, w5 = 0, w6 = 0, w7 = 0] =
    words;
  if (w0 === 0 && w1 === 0 && w2 === 0 && w3 === 0 && w4 === 0) {
    if (w5 === 0xffff || (w5 === 0 && w6 !== 0)) {
      // IPv4-mapped (::ffff:a.b.c.d) or IPv4-compatible (::a.b.c.d).
      return ipv4Class([w6 >> 8, w6 & 255, w7 >> 8, w7 & 255]);
    }
    if (w5 === 0 && w6 === 0) {
      return w7 === 1 ? "loopback" : w7 === 0 ? "unspecified" : "reserved";
    }
  }
  if (
    w0 === 0xfd00 && w1 === 0x0ec2 && w2 === 0 && w3 === 0 && w4 === 0 &&
    w5 === 0 && w6 === 0 && w7 === 0x254
  ) return "metadata"; // AWS's instance metadata over IPv6
  if (w0 === 0x64 && w1 === 0xff9b) {
    // NAT64 (64:ff9b::/96): the IPv4 address it stands for.
    return ipv4Class([w6 >> 8, w6 & 255, w7 >> 8, w7 & 255]);
  }
  if ((w0 & 0xffc0) === 0xfe80) return "link-local";
  if ((w0 & 0xfe00) === 0xfc00) return "private";
  if ((w0 & 0xffc0) === 0xfec0) return "private"; // site-local (deprecated)
  if ((w0 & 0xff00) === 0xff00) return "multicast";
  if (w0 === 0x2001 && w1 === 0x0db8) return "reserved"; // documentation
  if (w0 === 0x2002) {
    // 6to4: the IPv4 address it embeds.
    return ipv4Class([w1 >> 8, w1 & 255, w2 >> 8, w2 & 255]);
  }
  if ((w0 & 0xe000) === 0x2000) return "public";
  return "reserved";
}

function ipv4Class(bytes: readonly number[]): AddressClass {
  const [a = 0, b = 0, c = 0, d = 0] = bytes;
  if (a === 127) return "loopback";
  // Cloud metadata and host endpoints outside link-local: Alibaba Cloud's
  // instance metadata, Azure's WireServer.
  if (a === 100 && b === 100 && c === 100 && d === 200) return "metadata";
  if (a === 168 && b === 63 && c === 129 && d === 16) return "metadata";
  if (a === 0) return "unspecified";
  if (a === 169 && b === 254) return "link-local";
  if (a === 10) return "private";
  if (a === 172 && b >= 16 && b <= 31) return "private";
  if (a === 192 && b === 168) return "private";
  if (a === 100 && b >= 64 && b <= 127) return "private"; // carrier-grade NAT
  if (a === 198 && (b === 18 || b === 19)) return "private"; // benchmarking
  if (a >= 224 && a <= 239) return "multicast";
  if (a >= 240) return "reserved"; // and 255.255.255.255
  if (a === 192 && b === 0 && (c === 0 || c === 2)) return "reserved";
  if (a === 198 && b === 51 && c === 100) return "reserved";
  if (a === 203 && b === 0 && c === 113) return "reserved";
  return "public";
}

/**
 * An address's bytes as the native relay reads them: `"4,7f000001"` or
 * `"6,<32 hex digits>"` (network order), or `undefined` when it is not an
 * IP address (an IPv6 zone is dropped: a granted name never reaches a
 * link-local address).
 *
 * @param address An IPv4 or IPv6 address.
 * @returns The encoding.
 *
 * @example
 * ```ts
 * import { addressHex } from "./targets.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(addressHex("127.80.0.1"), "4,7f500001");
 * assert.equal(addressHex("::1"), "6,00000000000000000000000000000001");
 * assert.equal(addressHex("db.internal"), undefined);
 * ```
 */
export function addressHex(address: string): string | undefined {
  const hex = (value: number, digits: number): string =>
    value.toString(16).padStart(digits, "0");
  const v4 = ipv4Bytes(address);
  if (v4 !== undefined) return `4,${v4.map((byte) => hex(byte, 2)).join("")}`;
  const v6 = ipv6Words(address);
  if (v6 === undefined) return undefined;
  return `6,${v6.map((word) => hex(word, 4)).join("")}`;
}

function ipv4Bytes(address: string): number[] | undefined {
  const match = IPV4.exec(address);
  if (!match) return undefined;
  const bytes = match.slice(1).map(Number);
  return bytes.every((byte) => byte <= 255) ? bytes : undefined;
}

/** The eight 16-bit words of an IPv6 address, or `undefined`. */
function ipv6Words(address: string): number[] | undefined {
  let text = address;
  const zone = text.indexOf("%");
  if (zone >= 0) text = text.slice(0, zone);
  const lastColon = text.lastIndexOf(":");
  if (lastColon >= 0 && text.slice(lastColon + 1).includes(".")) {
    // An embedded IPv4 address (::ffff:1.2.3.4) as its two words.
    const v4 = ipv4Bytes(text.slice(lastColon + 1));
    if (v4 === undefined) return undefined;
    const [a = 0, b = 0, c = 0, d = 0] = v4;
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${
      ((c << 8) | d).toString(16)
    }`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const parse = (part: string): number[] | undefined => {
    if (part === "") return [];
    const words = part.split(":").map((word) =>
      /^[0-9a-f]{1,4}$/i.test(word) ? parseInt(word, 16) : NaN
    );
    return words.some(Number.isNaN) ? undefined : words;
  };
  const head = parse(halves[0] ?? "");
  const rest = halves.length === 2 ? parse(halves[1] ?? "") : [];
  if (head === undefined || rest === undefined) return undefined;
  const total = head.length + rest.length;
  if (halves.length === 1) return total === 8 ? head : undefined;
  if (total > 7) return undefined;
  return [...head, ...new Array<number>(8 - total).fill(0), ...rest];
}
