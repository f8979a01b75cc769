// A net grant of an address outside loopback ("192.0.2.2:5432", issue 26:
// "10.0.0.5:5432") holds for every process of the worker under
// bubblewrap, through either confine step: the step adds the address to
// the sandbox's own loopback interface (with CAP_NET_ADMIN, which it drops
// with the rest before the worker runs), so a client connecting to it
// unchanged reaches the listener and, through the parent's broker, the
// host's server; another port of that address and the same port on
// loopback reach nothing, and the host's server sees exactly the granted
// connections. The host address is this machine's first non-loopback IPv4
// address (skipped with the reason where it has none).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer, type Server } from "node:net";
import { networkInterfaces } from "node:os";
import process from "node:process";
import type { NetConnectionEvent } from "../../diagnostics.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME, scriptArgs } from "../_helpers/runtime.ts";
import { needs } from "../_helpers/tools.ts";

checkNoLeaks();

/** This machine's first IPv4 address outside loopback, if any. */
function hostAddress(): string | undefined {
  for (const entries of Object.values(networkInterfaces())) {
    for (const entry of entries ?? []) {
      if (entry.family === "IPv4" && !entry.internal) return entry.address;
    }
  }
  return undefined;
}

const ip = hostAddress();
let server: Server | undefined;
let trap: Server | undefined;
let port = 0;
let otherPort = 0;
let greeted = 0;
let trapped = 0;

interface Report {
  js: string;
  native: string;
  otherPort: string;
  loopback: string;
  capabilities: Record<string, string>;
  events: NetConnectionEvent[];
}

/** Runs the fixture parent (its own process: the step is chosen per process). */
function runParent(env: Record<string, string>): Promise<Report> {
  const script = fixture("security/net_address_parent.ts").pathname;
  const args = [ip ?? "", String(port), String(otherPort)];
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      scriptArgs(script, ...args),
      {
        encoding: "utf8",
        env: { ...process.env, NO_COLOR: "1", ...env },
        timeout: 120_000,
      },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(JSON.parse(stdout.trim().split("\n").at(-1) ?? ""));
      },
    );
  });
}

function listen(
  onSocket: (socket: import("node:net").Socket) => void,
): Promise<Server> {
  const s = createServer(onSocket);
  return new Promise((resolve, reject) => {
    s.once("error", reject);
    s.listen(0, ip, () => resolve(s));
  });
}

describe(
  `net grants of an address outside loopback (${RUNTIME})`,
  ip === undefined
    ? { skip: "this machine has no IPv4 address outside loopback" }
    : needs("bwrap"),
  () => {
    before(async () => {
      server = await listen((socket) => {
        greeted++;
        socket.on("error", () => {});
        socket.end("hello from the host\n");
      });
      port = (server.address() as { port: number }).port;
      trap = await listen((socket) => {
        trapped++;
        socket.destroy();
      });
      otherPort = (trap.address() as { port: number }).port;
    });

    after(async () => {
      for (const s of [server, trap]) {
        await new Promise((resolve) => s?.close(resolve));
      }
    });

    for (
      const [step, env] of [
        ["the native confine step", {}],
        ["the runtime confine step", { AIRLOCK_RUNTIME_CONFINE_STEP: "1" }],
      ] as const
    ) {
      test(`through ${step}, JavaScript and native code reach the granted address and nothing else`, async () => {
        const before = greeted;
        const report = await runParent(env);
        assert.equal(report.js, "hello from the host");
        assert.equal(report.native, "hello from the host");
        assert.notEqual(report.otherPort, "ok");
        assert.notEqual(report.loopback, "ok");
        assert.equal(greeted - before, 2, "the host's server saw both");
        assert.equal(trapped, 0, "the other port saw nothing");
        for (const value of Object.values(report.capabilities)) {
          assert.equal(value, "0000000000000000", "no capability is left");
        }
        const reached = report.events.filter((e) => e.bytesIn > 0);
        assert.equal(reached.length, 2);
        for (const event of reached) {
          assert.equal(event.target, `${ip}:${port}`);
          assert.equal(event.address, ip);
        }
      });
    }
  },
);
