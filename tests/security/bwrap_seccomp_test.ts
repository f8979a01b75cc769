// Attack class: unix sockets and other kernel interfaces where Landlock is
// missing. The seccomp filter (socket(AF_UNIX) unless net is granted,
// ptrace, process_vm_readv/writev, io_uring, …: sandbox/seccomp.ts) is
// installed by the Landlock step; where that step cannot run but
// bubblewrap can (a kernel without Landlock), bubblewrap installs the same
// filter (--seccomp, fd 3 opened by a shell that execs bubblewrap).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { seccompFilter } from "../../src/runtime/sandbox/seccomp.ts";
import { findExecutable } from "../../src/runtime/launch/executable.ts";
import { seccompFile } from "../../src/runtime/sandbox/seccomp_file.ts";
import { bwrapWrapper } from "../../src/runtime/sandbox/bwrap_wrapper.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";

checkNoLeaks();

const SKIP = needs("bwrap");
const REPO = realpathSync(fileURLToPath(new URL("../../", import.meta.url)));
const BUN = realpathSync(join(REPO, "node_modules", ".bin", "bun"));
const dir = realpathSync(mkdtempSync(join(tmpdir(), "airlock-seccomp-test-")));
const socket = join(dir, "host.sock");
let server: Server | undefined;
let accepted = 0;
const cleanups: (() => void)[] = [];
after(() => {
  for (const cleanup of cleanups) cleanup();
  server?.close();
  rmSync(dir, { recursive: true, force: true });
});

function refuse(detail: string): never {
  throw new Error(detail);
}

/** Runs a Bun script in bubblewrap (with the filter or not); its stdout. */
function connectInSandbox(seccomp: boolean, net: boolean): string {
  const bwrap = findExecutable("bwrap", { path: process.env.PATH }, refuse) ??
    "";
  const permissions = resolvePermissions(
    net ? { read: [dir], net: true } : { read: [dir] },
    dir,
  );
  const script =
    `require("node:net").connect(${
      JSON.stringify(socket)
    }).on("connect", function () { console.log("connected"); this.destroy(); })` +
    `.on("error", (e) => console.log(e.code));`;
  const step = bwrapWrapper({
    bwrap,
    runtimeBinary: BUN,
    permissions,
    cwd: dir,
    ...(seccomp
      ? {
        seccomp: {
          file: seccompFile(seccompFilter(permissions), (callback) =>
            after(callback)),
          shell: "/bin/sh",
        },
      }
      : {}),
  }).wrap({ argv: [BUN, "-e", script], env: {}, readOnly: [] });
  const [program = "", ...args] = step.argv;
  return execFileSync(program, args, {
    encoding: "utf8",
    env: step.env,
    timeout: 60_000,
  }).trim();
}

describe("seccomp through bubblewrap", SKIP, () => {
  test("without the filter a sandboxed worker with read on a directory reaches a unix socket in it (the 0.1 hole)", async () => {
    server = createServer((connection) => {
      accepted++;
      connection.destroy();
    });
    await new Promise<void>((resolve) => server!.listen(socket, resolve));
    assert.equal(connectInSandbox(false, false), "connected");
  });

  test("with the filter, socket(AF_UNIX) is refused unless net is granted", () => {
    const before = accepted;
    // Bun reports the refused socket(2) (EPERM) as ECONNREFUSED.
    assert.notEqual(connectInSandbox(true, false), "connected");
    assert.equal(accepted, before, "the host's socket saw no connection");
    assert.equal(connectInSandbox(true, true), "connected");
  });
});
