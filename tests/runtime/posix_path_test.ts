// airlock's own POSIX path functions (src/runtime/posix_path.ts) give what
// node:path and node:url give, so that option validation can skip loading
// them (issue 23 item 4).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import url from "node:url";
import {
  posixBasename,
  posixFileUrlToPath,
  posixIsAbsolute,
  posixPathToFileUrl,
  posixResolve,
} from "../../src/runtime/posix_path.ts";

/** Paths with what trips path code: dots, slashes, escapes, non-ASCII. */
const PATHS: readonly string[] = [
  "/",
  " /lead/ space ",
  "//",
  "///a//b/",
  "/a/b/c",
  "/a/./b/../c/",
  "/a/b/../../..",
  "/../x",
  "/a/..b/.c/...",
  "/x/y.ts",
  "/a b/c%20d/e%2fF",
  "/q?x=1#frag",
  "/back\\slash",
  "/tab\there/new\nline/cr\rhere",
  "/ümlaut/日本/🦕",
  "/C:/windows/like",
  "/a/|pipe|/<angle>/\"quote\"/'single'/`tick`",
  "/percent%/%%/%zz",
  "/semi;colon/@at/:colon/[br]/{c}/^/~",
  "relative/dir",
  "./here",
  "../up",
  "a",
  "",
  ".",
  "..",
  "trailing/",
];

/** Random paths of the characters above. */
function randomPaths(count: number): string[] {
  const alphabet = "/./../a%2f?#\\\t\n\r\x00\x7f é日🦕:;@[]^~ |x";
  const out: string[] = [];
  let seed = 7;
  const next = (): number => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed;
  };
  for (let i = 0; i < count; i++) {
    let p = next() % 2 === 0 ? "/" : "";
    const length = next() % 24;
    for (let j = 0; j < length; j++) {
      p += [...alphabet][next() % [...alphabet].length];
    }
    out.push(p);
  }
  return out;
}

const ALL = [...PATHS, ...randomPaths(400)];

describe("posix_path", () => {
  test("posixIsAbsolute() and posixBasename() agree with node:path", () => {
    for (const p of ALL) {
      assert.equal(posixIsAbsolute(p), path.posix.isAbsolute(p), p);
      assert.equal(posixBasename(p), path.posix.basename(p), p);
    }
  });

  test("posixResolve() agrees with node:path where a segment is absolute", () => {
    for (const p of ALL) {
      for (const base of ["/base/dir", "/", "/a/../b/"]) {
        assert.equal(posixResolve(base, p), path.posix.resolve(base, p), p);
      }
      if (path.posix.isAbsolute(p)) {
        assert.equal(posixResolve(p), path.posix.resolve(p), p);
      } else assert.equal(posixResolve(p), undefined, p);
    }
    assert.equal(
      posixResolve("/a", "", "b", ""),
      path.posix.resolve("/a", "", "b", ""),
    );
    assert.equal(posixResolve("/a", "/b", "c"), "/b/c");
  });

  test("posixPathToFileUrl() agrees with node:url for absolute paths", () => {
    for (const p of ALL) {
      const absolute = path.posix.resolve("/base", p) +
        (p.endsWith("/") ? "/" : "");
      const ours = posixPathToFileUrl(absolute);
      assert.equal(ours?.href, url.pathToFileURL(absolute).href, absolute);
    }
    assert.equal(posixPathToFileUrl("relative"), undefined);
    // A trailing control stays in the URL, as Deno's built-in keeps it
    // (Bun 1.4's trims it: the URL of another file).
    assert.equal(posixPathToFileUrl("/trail\x01")?.href, "file:///trail%01");
  });

  test("posixFileUrlToPath() agrees with node:url, errors included", () => {
    const urls = [
      ...ALL.map((p) => url.pathToFileURL(path.posix.resolve("/base", p)).href),
      "file:///a%2Fb",
      "file:///a%2fb",
      "file://localhost/etc/x",
      "file://host/etc/x",
      "file:///%E6%97%A5",
      "file:///a%20b?q=1#h",
      "http://example.com/x",
      "not a url",
    ];
    for (const href of urls) {
      let theirs: string | Error;
      try {
        theirs = url.fileURLToPath(href);
      } catch (error: unknown) {
        theirs = error as Error;
      }
      for (
        const input of [href, ...(URL.canParse(href) ? [new URL(href)] : [])]
      ) {
        if (theirs instanceof Error) {
          assert.throws(() => posixFileUrlToPath(input), TypeError, href);
        } else assert.equal(posixFileUrlToPath(input), theirs, href);
      }
    }
  });
});
