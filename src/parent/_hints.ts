/**
 * Hints that name the fix for a worker's failed access: which grant of
 * `permissions` it needs. Deno's own advice ("run again with the
 * --allow-env flag") is wrong inside a worker, and under the OS sandbox a
 * read outside the grants fails as `ENOENT` (bubblewrap hides it) or
 * `EACCES` (Landlock alone refuses it), a write as `EROFS` or `EACCES`, a
 * connection as `ECONNREFUSED` or `EAI_AGAIN`, none of which says
 * "permission". Private to src/parent.
 *
 * @module
 */

import type { ResolvedPermissions } from "../runtime/permissions.ts";

/** What a hint is computed from: the worker's grants and confinement. */
export interface HintContext {
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** The worker's working directory (relative paths resolve against it). */
  cwd: string;
  /** Whether an OS sandbox confines the worker. */
  sandboxed: boolean;
  /**
   * Whether a path exists for the parent: `true`, `false`, or `undefined`
   * when it cannot tell.
   */
  exists(path: string): boolean | undefined;
}

/** The fields of an error a hint is read from. */
interface ErrorFields {
  name: unknown;
  message: unknown;
  code: unknown;
  path: unknown;
  syscall: unknown;
  address: unknown;
  port: unknown;
  stack: unknown;
}

/** How deep the cause chain is searched for an access failure. */
const MAX_CAUSE_DEPTH = 8;

/** `Requires env access to "X", run again with the --allow-env flag`. */
const NOT_CAPABLE =
  /^Requires (read|write|net|env|run|ffi|sys|import) access(?: to (?:"((?:[^"\\]|\\.)*)"|([^,]+)))?,/;

/** Codes of a failed connection that a missing `net` grant explains. */
const NET_CODES = new Set([
  "EAI_AGAIN",
  "ENOTFOUND",
  "ECONNREFUSED",
  "ENETUNREACH",
  "EHOSTUNREACH",
  "ConnectionRefused",
  "FailedToOpenSocket",
]);

/**
 * The hint for an error a worker threw, if it is an access the worker's
 * grants do not cover. Looks at the error and its cause chain. Never
 * throws.
 *
 * @param error The error (as rebuilt in the parent).
 * @param context The worker's grants.
 * @returns The hint, or `undefined`.
 */
export function accessHint(
  error: unknown,
  context: HintContext,
): string | undefined {
  try {
    let current: unknown = error;
    for (let depth = 0; depth < MAX_CAUSE_DEPTH; depth++) {
      if (typeof current !== "object" || current === null) return undefined;
      const fields = readFields(current);
      const hint = notCapableHint(fields) ?? interfacesHint(fields, context) ??
        bindingsHint(fields, context) ?? errnoHint(fields, context);
      if (hint !== undefined) return hint;
      current = Object.getOwnPropertyDescriptor(current, "cause")?.value;
    }
  } catch {
    // A value that cannot be read has no hint.
  }
  return undefined;
}

function readFields(value: object): ErrorFields {
  const own = (key: string): unknown =>
    Object.getOwnPropertyDescriptor(value, key)?.value;
  const name = own("name") ?? (value instanceof Error ? value.name : undefined);
  return {
    name,
    message: own("message"),
    code: own("code"),
    path: own("path"),
    syscall: own("syscall"),
    address: own("address"),
    port: own("port"),
    stack: own("stack"),
  };
}

/** Deno's `NotCapable`: the grant it names, as airlock spells it. */
function notCapableHint(fields: ErrorFields): string | undefined {
  if (fields.name !== "NotCapable" && fields.name !== "PermissionDenied") {
    return undefined;
  }
  if (typeof fields.message !== "string") return undefined;
  const match = NOT_CAPABLE.exec(fields.message);
  if (!match) return undefined;
  const kind = match[1] === "import" ? "net" : match[1]!;
  const quoted = match[2];
  const target = quoted !== undefined
    ? quoted.replace(/\\(.)/g, "$1")
    : match[3]?.trim();
  const flag = `--allow-${match[1]}`;
  if (target === undefined || target === "" || target.startsWith("<")) {
    return `a worker's permissions come from its options, not from Deno's flags: grant it with permissions.${kind}: true (or list what it needs) instead of ${flag}`;
  }
  return `a worker's permissions come from its options, not from Deno's flags: grant it with permissions.${kind}: [${
    JSON.stringify(target)
  }] instead of ${flag}`;
}

/**
 * A bare `EPERM` from listing the network interfaces: the netlink socket
 * `os.networkInterfaces()` opens is refused under Landlock alone without a
 * net grant and with net scopes (allowed only in a network namespace of
 * the worker's own: bubblewrap without net), and the error names no path. `process.report.getReport()`
 * lists them, and detect-libc calls it (lmdb and @libsql/client load
 * their add-on through it).
 */
function interfacesHint(
  fields: ErrorFields,
  context: HintContext,
): string | undefined {
  if (!context.sandboxed || context.permissions.net === true) return undefined;
  if (fields.name !== "PermissionDenied" && fields.code !== "EPERM") {
    return undefined;
  }
  if (
    typeof fields.stack !== "string" ||
    !fields.stack.includes("networkInterfaces")
  ) return undefined;
  return "the OS sandbox refused the socket that lists the network interfaces (os.networkInterfaces(), which process.report.getReport() calls: detect-libc does, for lmdb and @libsql/client): listing them needs permissions.net: true here (inside bubblewrap a worker without net lists its own loopback; under Landlock alone, or with net scopes, it would list the host's)";
}

/** The `bindings` package's failure when it cannot see its package root. */
const BINDINGS_ROOT = /^Could not find module root given file: "([^"]+)"/;

/**
 * The add-on loader `bindings` (hnswlib-node and many node-gyp add-ons)
 * looks for its package's root with `fs.accessSync` from the add-on's
 * path and swallows the refusal: a missing read grant on the package (or,
 * on Deno, `sys: ["uid"]`, which Deno's `accessSync` asks for) reads
 * `Could not find module root given file: "…". Do you have a package.json
 * file?`.
 */
function bindingsHint(
  fields: ErrorFields,
  context: HintContext,
): string | undefined {
  if (typeof fields.message !== "string") return undefined;
  const match = BINDINGS_ROOT.exec(fields.message);
  if (!match) return undefined;
  const file = match[1]!;
  const dir = /^(.*\/node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(file)?.[1] ??
    file.slice(0, Math.max(file.lastIndexOf("/"), 1));
  const why =
    'the add-on loader "bindings" looks for its package\'s root with fs.accessSync, and a refusal reads as no package.json';
  const absolute = resolvePath(dir, context.cwd);
  if (absolute === undefined) return undefined;
  const sys = context.permissions.sys;
  const uid = sys === true || sys.includes("uid");
  if (!covers(context.permissions.read, absolute, context.cwd)) {
    return `${why}: grant permissions.read: [${JSON.stringify(absolute)}]${
      uid
        ? ""
        : ' (a Deno worker also needs permissions.sys: ["uid"], which accessSync asks for)'
    }`;
  }
  if (!uid) {
    return `${why}: a Deno worker needs permissions.sys: ["uid"] for it (accessSync asks for the uid)`;
  }
  return undefined;
}

/** An errno failure on a path (or host) the grants do not cover. */
function errnoHint(
  fields: ErrorFields,
  context: HintContext,
): string | undefined {
  if (!context.sandboxed || typeof fields.code !== "string") return undefined;
  const code = fields.code;
  const path = typeof fields.path === "string"
    ? fields.path
    : typeof fields.message === "string"
    ? quotedPath(fields.message)
    : undefined;
  const syscall = typeof fields.syscall === "string" ? fields.syscall : "";
  if (NET_CODES.has(code)) {
    const address = typeof fields.address === "string"
      ? fields.address.includes(":") ? `[${fields.address}]` : fields.address
      : undefined;
    const port = typeof fields.port === "number" ? `:${fields.port}` : "";
    return netHint(address && `tcp://${address}${port}`, path, context);
  }
  if (path === undefined || path === "") return undefined;
  if (syscall.startsWith("spawn")) {
    if (code !== "ENOENT" && code !== "EACCES" && code !== "EPERM") {
      return undefined;
    }
    const run = context.permissions.run;
    if (
      run === true ||
      run.some((program) => program === path || program.endsWith(`/${path}`))
    ) {
      return undefined;
    }
    return `the OS sandbox hides programs the worker was not granted: if it should run "${path}", add it to permissions.run (permissions: { run: [${
      JSON.stringify(path)
    }] })`;
  }
  const absolute = resolvePath(path, context.cwd);
  if (absolute === undefined) return undefined;
  switch (code) {
    case "ENOENT":
    case "ENOTDIR": {
      if (covers(context.permissions.read, absolute, context.cwd)) {
        return undefined;
      }
      const exists = context.exists(absolute);
      if (exists === false) return undefined;
      return `"${absolute}" is outside the worker's read grants, and the OS sandbox hides what is not granted${
        exists ? " (it exists for the parent)" : ""
      }: if the worker should read it, add it to permissions.read (permissions: { read: [${
        JSON.stringify(absolute)
      }] })`;
    }
    case "EROFS": {
      if (covers(context.permissions.write, absolute, context.cwd)) {
        return undefined;
      }
      return `"${absolute}" is outside the worker's write grants, and the OS sandbox makes it read-only: if the worker should write it, add it to permissions.write (permissions: { write: [${
        JSON.stringify(absolute)
      }] })`;
    }
    case "EACCES":
    case "EPERM": {
      // Landlock alone (no bubblewrap) refuses what bubblewrap would hide.
      const read = covers(context.permissions.read, absolute, context.cwd);
      const write = covers(context.permissions.write, absolute, context.cwd);
      if (read && write) return undefined;
      const quoted = JSON.stringify(absolute);
      if (read) {
        return `"${absolute}" is outside the worker's write grants and the OS sandbox refused the access: if the worker should change it, add it to permissions.write (permissions: { write: [${quoted}] })`;
      }
      return `"${absolute}" is outside the worker's grants and the OS sandbox refused the access: if the worker should read it, add it to permissions.read (permissions: { read: [${quoted}] }); to change it, to permissions.write`;
    }
    default:
      return undefined;
  }
}

function netHint(
  endpoint: string | undefined,
  path: string | undefined,
  context: HintContext,
): string | undefined {
  const net = context.permissions.net;
  if (net === true) return undefined;
  let host = "host:port";
  const target = endpoint ?? path;
  if (target !== undefined) {
    try {
      const url = new URL(target);
      const port = url.port ||
        (url.protocol === "https:"
          ? "443"
          : url.protocol === "http:"
          ? "80"
          : "");
      host = port ? `${url.hostname}:${port}` : url.hostname;
    } catch {
      // Not a URL: keep the placeholder.
    }
  }
  return `${
    net.length === 0
      ? "the worker has no network access"
      : "the worker may reach only the hosts in permissions.net"
  }: if it should connect there, add the host to permissions.net (permissions: { net: [${
    JSON.stringify(host)
  }] })`;
}

/** The last single-quoted path in a message (`open '/etc/x'`). */
function quotedPath(message: string): string | undefined {
  const end = message.lastIndexOf("'");
  if (end <= 0) return undefined;
  const start = message.lastIndexOf("'", end - 1);
  if (start === -1) return undefined;
  return message.slice(start + 1, end);
}

function resolvePath(path: string, cwd: string): string | undefined {
  if (path.startsWith("file://")) {
    try {
      return decodeURIComponent(new URL(path).pathname);
    } catch {
      return undefined;
    }
  }
  if (path.startsWith("/")) return normalize(path);
  if (/^[a-z][a-z0-9+.-]*:/i.test(path)) return undefined;
  return normalize(`${cwd}/${path}`);
}

function normalize(path: string): string {
  const parts: string[] = [];
  for (const part of path.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  return `/${parts.join("/")}`;
}

/** Whether a grant covers a path: `true`, or the path is at or under one listed. */
function covers(
  scopes: true | readonly string[],
  path: string,
  cwd: string,
): boolean {
  if (scopes === true) return true;
  const absolute = resolvePath(path, cwd) ?? path;
  return scopes.some((scope) =>
    absolute === scope ||
    absolute.startsWith(scope.endsWith("/") ? scope : `${scope}/`)
  );
}

/** A grant a hint names, as `permissions` spells it. */
export interface HintedGrant {
  /** The kind: `"read"`, `"write"`, `"net"`, `"env"`, `"run"`, `"ffi"` or `"sys"`. */
  kind: string;
  /** The scope to add, or `true` when the hint could name none. */
  value: string | true;
}

/**
 * Every hint above names its grant in one of two spellings,
 * `permissions: { read: ["/x"] }` or `permissions.sys: ["uid"]` (or
 * `permissions.env: true`): this reads it back.
 */
const HINTED_GRANT =
  /permissions(?:\.(read|write|net|env|run|ffi|sys): |: \{ (read|write|net|env|run|ffi|sys): )(?:\[("(?:[^"\\]|\\.)*")\]|(true))/;

/**
 * The grant a hint of this module names, read back from its text (a
 * `RemoteError`'s `hint`, or a start error's message, which carries it).
 * Learn mode adds it and runs again.
 *
 * @param text The hint, or a message holding one.
 * @returns The grant, or `undefined` when the text names none.
 */
export function grantInHint(text: string): HintedGrant | undefined {
  const match = HINTED_GRANT.exec(text);
  if (!match) return undefined;
  const kind = (match[1] ?? match[2])!;
  if (match[4] === "true" || match[3] === undefined) {
    return { kind, value: true };
  }
  try {
    const value = JSON.parse(match[3]) as unknown;
    return typeof value === "string" ? { kind, value } : undefined;
  } catch {
    return undefined;
  }
}
