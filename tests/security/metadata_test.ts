// Attack class: changing the metadata of files outside the grants (mode,
// times, owner). A worker with nothing granted, run by the file's owner,
// made a file outside its grants world-readable (chmod 0666) and reset its
// times: under bubblewrap the path is not there; under Landlock alone it is
// not covered (Landlock checks no chmod, utimes or chown), so it succeeds.
// As root that reaches every root-owned file (/etc/shadow 0666, a setuid
// bit on a root-owned program): the test pins what holds and names the gap.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, statSync, writeFileSync } from "node:fs";
import { session } from "../../mod.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import {
  captureLog,
  checkNoLeaks,
  fixture,
  hasTool,
  scratchDir,
} from "../_helpers.ts";
import { sandboxSkip } from "./_sandbox.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
const SKIP = sandboxSkip();

describe("metadata outside the grants", { skip: SKIP }, () => {
  for (const runtime of ["bun", "deno"] as const) {
    test(
      `a ${runtime} worker with nothing granted cannot chmod or touch a file outside its grants`,
      {
        todo: hasTool("bwrap")
          ? undefined
          : "open under Landlock alone: Landlock does not check chmod, utimes or chown; fix: the seccomp filter refuses the path-based calls (chmod, fchmodat, fchmodat2, chown, lchown, fchownat, utimes, utimensat, setxattr family) where bubblewrap is not there",
      },
      async () => {
        using dir = scratchDir("metadata");
        const secret = dir.join("secret.txt");
        writeFileSync(secret, "secret");
        chmodSync(secret, 0o600);
        const before = statSync(secret);
        await using s = await session<typeof evaluate>(worker, {
          ...captureLog(),
          runtime,
          // Deno's own flags refuse chmod without a write grant; native code
          // is what the OS sandbox alone must stop.
          permissions: runtime === "deno" ? { ffi: true } : {},
        });
        const code = runtime === "bun"
          ? "fs.chmodSync(arg, 0o666); fs.utimesSync(arg, 1, 1); return 'changed'"
          : `const libc = Deno.dlopen("libc.so.6", {
             chmod: { parameters: ["buffer", "u32"], result: "i32" },
           });
           const result = libc.symbols.chmod(new TextEncoder().encode(arg + "\\0"), 0o666);
           return result === 0 ? "changed" : "refused";`;
        const outcome = await s.run(code, secret);
        const after = statSync(secret);
        assert.equal(after.mode & 0o777, 0o600, JSON.stringify(outcome));
        assert.equal(after.mtimeMs, before.mtimeMs);
      },
    );
  }
});
