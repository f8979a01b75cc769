// The `launcher` option for real, through ssh: an OpenSSH server on
// loopback started by scripts/ci/start_sshd.sh (.ci/run runs it), whose
// "remote" side is this machine. Skipped, with the reason printed, when that
// server is not running.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { session, WorkerCrashedError } from "../../mod.ts";
import type { ConformanceWorker } from "../conformance/conformance.ts";
import {
  findPython,
  PYTHON_ENTRY,
  pythonFixture,
} from "../conformance/_python.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive, liveChildren } from "../_helpers/processes.ts";
import { needs, skipUnless } from "../_helpers/tools.ts";
import { until, within } from "../_helpers/wait.ts";

checkNoLeaks();

const SSHD_DIR = process.env.AIRLOCK_SSHD_DIR ?? "/tmp/airlock-sshd";

interface SshSetup {
  launcher?: string[];
  skip?: string;
}

function sshSetup(): SshSetup {
  const file = join(SSHD_DIR, "launcher.json");
  if (!existsSync(file)) {
    return {
      skip: `no test sshd (${file} is missing; run scripts/ci/start_sshd.sh)`,
    };
  }
  try {
    const setup = JSON.parse(readFileSync(file, "utf8")) as {
      launcher: string[];
      pidFile: string;
    };
    const pid = Number(readFileSync(setup.pidFile, "utf8").trim());
    if (!isAlive(pid)) {
      return {
        skip:
          `the test sshd (pid ${pid}) is not running; run scripts/ci/start_sshd.sh`,
      };
    }
    return { launcher: setup.launcher };
  } catch (error: unknown) {
    return {
      skip: `cannot read ${file}: ${
        error instanceof Error ? error.message : String(error)
      }`,
    };
  }
}

const ssh = sshSetup();
const python = findPython();
const skip = needs("sshd", "python3").skip ?? skipUnless(ssh.skip).skip;
const launcher = ssh.launcher ?? [];

function sshTest(name: string, fn: () => Promise<void>): void {
  if (skip === undefined) test(name, fn);
  else test(name, { skip }, () => {});
}

function pythonCommand(): string[] {
  return [
    python.path ?? "python3",
    "-B",
    PYTHON_ENTRY,
    pythonFixture("conformance_worker.py"),
  ];
}

/** The local ssh client processes this test process started. */
function sshClients(): number[] {
  return liveChildren()
    .filter((child) => child.cmdline.includes(launcher[0] ?? "ssh"))
    .map((child) => child.pid);
}

describe("launcher: ssh", () => {
  sshTest(
    "session() with an ssh launcher runs a Python worker on the remote side",
    async () => {
      const s = await session<ConformanceWorker>(PYTHON_ENTRY, {
        launcher,
        command: pythonCommand(),
        onStderr: () => {},
      });
      const remotePid = s.pid ?? -1;
      try {
        assert.equal(await s.add(2, 3), 5);
        assert.equal(await s.whoami(), remotePid, "pid is the remote worker's");
        assert.deepEqual(await s.echo({ big: new Uint8Array(100_000) }), {
          big: new Uint8Array(100_000),
        });
        assert.equal(
          s.stats().rssBytes,
          undefined,
          "a launched worker's memory cannot be read from here",
        );
        assert.equal(sshClients().length, 1, "one local ssh client");
      } finally {
        await within(s.close(), 15_000, "close()");
      }
      assert.equal(isAlive(remotePid), false, "the remote worker exited");
      assert.deepEqual(sshClients(), [], "the ssh client exited");
    },
  );

  sshTest(
    "killing the ssh client fails pending calls with WorkerCrashedError and ends the remote worker",
    async () => {
      const log = captureLog();
      await using s = await session<ConformanceWorker>(PYTHON_ENTRY, {
        launcher,
        command: pythonCommand(),
        onStderr: log.onStderr,
      });
      const remotePid = s.pid ?? -1;
      const [client] = sshClients();
      assert.ok(client !== undefined, "the ssh client runs locally");
      const pending = Array.from(
        { length: 3 },
        () => s.hang().then(() => undefined, (error: unknown) => error),
      );
      assert.equal(await s.add(1, 1), 2, "the hanging calls are in flight");
      process.kill(client, "SIGKILL");
      const failures = await within(
        Promise.all(pending),
        15_000,
        "pending calls after the connection died",
      );
      for (const failure of failures) {
        assert.ok(failure instanceof WorkerCrashedError, String(failure));
        assert.equal(failure.signal, "SIGKILL");
        assert.equal(failure.op, "hang");
      }
      await until(
        () => !isAlive(remotePid),
        10_000,
        "the remote worker to exit once its connection is gone",
      );
      assert.equal(
        await s.add(2, 2),
        4,
        "the next call opens a new connection",
      );
      assert.notEqual(s.pid, remotePid);
    },
  );

  sshTest(
    "a remote worker that dies fails its calls with WorkerCrashedError",
    async () => {
      await using s = await session<ConformanceWorker>(PYTHON_ENTRY, {
        launcher,
        command: pythonCommand(),
        onStderr: () => {},
      });
      const failure = await s.exitWith(3).then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(failure instanceof WorkerCrashedError, String(failure));
      assert.equal(failure.exitCode, 3, "ssh passes the exit code on");
      const killed = await s.crash().then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(killed instanceof WorkerCrashedError, String(killed));
      assert.equal(
        killed.exitCode,
        255,
        "ssh reports a remote death by signal as its own code 255",
      );
    },
  );

  // Deno's argv holds a data: URL with a ';': the ssh launcher's quoting
  // (shellQuote in src/runtime/launch/transport.ts) is what this test needs.
  sshTest(
    "session() with an ssh launcher runs a TypeScript worker module",
    async () => {
      const module = new URL(
        "../conformance/typescript_worker.ts",
        import.meta.url,
      );
      await using s = await session<ConformanceWorker>(module, {
        launcher,
        onStderr: () => {},
      });
      assert.equal(await s.add(20, 22), 42);
      assert.equal(
        await s.echo("it's a 'quoted' $HOME; &"),
        "it's a 'quoted' $HOME; &",
      );
    },
  );
});
