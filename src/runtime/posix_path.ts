/**
 * The few `node:path` and `node:url` functions the start of a worker calls
 * first (option validation: the module's URL, `cwd`, the grants), written
 * here for POSIX, with the same results (a test compares them with the
 * built-ins on many inputs). Loading `node:path` or `node:url` is the first
 * run of Node compatibility's JavaScript for them (on Deno, 5 to 14 ms in
 * one block; issue 23 item 4); these are plain string work. Windows paths
 * keep the built-ins (`node_builtins.ts` decides).
 *
 * @module
 */

/**
 * `path.posix.isAbsolute`.
 *
 * @param path A path.
 * @returns Whether it starts with `/`.
 */
export function posixIsAbsolute(path: string): boolean {
  return path.length > 0 && path.charCodeAt(0) === 0x2f;
}

/**
 * `path.posix.resolve` of segments one of which is absolute: from the
 * right, up to the last absolute one, normalised (`.`, `..` and repeated
 * slashes; never above `/`; no trailing slash).
 *
 * @param paths The segments.
 * @returns The absolute path, or `undefined` when no segment is absolute
 *   (the working directory would decide: the built-in's case).
 */
export function posixResolve(...paths: string[]): string | undefined {
  let joined = "";
  let absolute = false;
  for (let i = paths.length - 1; i >= 0 && !absolute; i--) {
    const path = paths[i] as string;
    if (path.length === 0) continue;
    joined = joined.length === 0 ? path : `${path}/${joined}`;
    absolute = posixIsAbsolute(path);
  }
  if (!absolute) return undefined;
  const kept: string[] = [];
  for (const segment of joined.split("/")) {
    if (segment === "" || segment === ".") continue;
    if (segment === "..") kept.pop();
    else kept.push(segment);
  }
  return `/${kept.join("/")}`;
}

/**
 * `path.posix.basename` without a suffix to strip.
 *
 * @param path A path.
 * @returns Its last segment (trailing slashes ignored; `""` for `/`).
 */
export function posixBasename(path: string): string {
  let end = path.length;
  while (end > 0 && path.charCodeAt(end - 1) === 0x2f) end--;
  if (end === 0) return "";
  return path.slice(path.lastIndexOf("/", end - 1) + 1, end);
}

/**
 * `url.fileURLToPath` on POSIX.
 *
 * @param url A `file:` URL or its string.
 * @returns The path, percent-decoded.
 * @throws {TypeError} when it is not a URL, not `file:`, has a host, or
 *   holds an encoded `/`.
 */
export function posixFileUrlToPath(url: string | URL): string {
  const parsed = typeof url === "string" ? new URL(url) : url;
  if (!(parsed instanceof URL)) {
    throw new TypeError(
      'The "path" argument must be of type string or an instance of URL',
    );
  }
  if (parsed.protocol !== "file:") {
    throw new TypeError("The URL must be of scheme file");
  }
  if (parsed.hostname !== "") {
    throw new TypeError(
      `File URL host must be "localhost" or empty on linux`,
    );
  }
  const pathname = parsed.pathname;
  if (/%2f/i.test(pathname)) {
    throw new TypeError(
      "File URL path must not include encoded / characters",
    );
  }
  return decodeURIComponent(pathname);
}

/**
 * What a path must have percent-encoded besides what the URL parser
 * encodes in a path: `%` first, then what would end the path or be read
 * otherwise, and the rest of what Deno's and Bun's built-ins encode (the
 * test compares); controls and spaces after these.
 */
const PATH_ESCAPES: ReadonlyArray<readonly [RegExp, string]> = [
  [/%/g, "%25"],
  [/\\/g, "%5C"],
  [/\?/g, "%3F"],
  [/#/g, "%23"],
  [/\[/g, "%5B"],
  [/\]/g, "%5D"],
  [/\^/g, "%5E"],
  [/\|/g, "%7C"],
  [/~/g, "%7E"],
];

/**
 * `url.pathToFileURL` on POSIX, for a path that is absolute or resolved
 * against an absolute one.
 *
 * @param path An absolute path.
 * @returns Its `file:` URL (a trailing slash kept), or `undefined` when the
 *   path is relative (the working directory would decide).
 */
export function posixPathToFileUrl(path: string): URL | undefined {
  let resolved = posixResolve(path);
  if (resolved === undefined) return undefined;
  if (path.endsWith("/") && !resolved.endsWith("/")) resolved += "/";
  for (const [pattern, escape] of PATH_ESCAPES) {
    resolved = resolved.replace(pattern, escape);
  }
  // Controls and spaces too: the parser trims them at either end.
  resolved = resolved.replace(
    // deno-lint-ignore no-control-regex
    /[\x00-\x20\x7f]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0")}`,
  );
  return new URL(`file://${resolved}`);
}
