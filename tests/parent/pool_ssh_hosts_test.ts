// pool({ launchers }) over three "hosts": three OpenSSH servers on loopback
// ports this file starts itself (own keys, own configs), each reached by an
// ssh launcher. 600 calls (writes, and reads declared idempotent) with one
// host stopped mid-run (its sshd processes killed, so every connection to
// it drops) and started again. Every call settles; no write runs twice (a
// ledger file the workers append to); the lost host's workers are replaced
// on the others; the host is used again once it is back; after close() no
// worker process is left on any host.
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  type ChildProcess,
  execFile,
  execFileSync,
  spawn,
} from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { pool, WorkerCrashedError } from "../../mod.ts";
import {
  findPython,
  PYTHON_ENTRY,
  pythonFixture,
} from "../conformance/_python.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { needs, skipUnless } from "../_helpers/tools.ts";
import { until, within } from "../_helpers/wait.ts";

checkNoLeaks();

const SSHD = ["/usr/sbin/sshd", "/usr/bin/sshd"].find((path) =>
  existsSync(path)
);
const python = findPython();
const TOTAL = 600;
const IN_FLIGHT = 12;
const HOSTS = 3;
const LOST = 1;
const HELD_BACK = 100;

interface LedgerWorker {
  write(ledger: string, id: number, ms: number): number;
  read(ledger: string, id: number, ms: number): number;
}

/** One process of /proc: pid, parent, command name. */
function processes(): { pid: number; ppid: number; comm: string }[] {
  const found: { pid: number; ppid: number; comm: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const close = stat.lastIndexOf(")");
      const fields = stat.slice(close + 2).split(" ");
      if (fields[0] === "Z" || fields[0] === "X") continue;
      found.push({
        pid: Number(entry),
        ppid: Number(fields[1]),
        comm: stat.slice(stat.indexOf("(") + 1, close),
      });
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/** The live descendants of a process. */
function descendants(root: number): { pid: number; comm: string }[] {
  const all = processes();
  const out: { pid: number; comm: string }[] = [];
  const parents = new Set([root]);
  let grew = true;
  while (grew) {
    grew = false;
    for (const proc of all) {
      if (parents.has(proc.ppid) && !parents.has(proc.pid)) {
        parents.add(proc.pid);
        out.push(proc);
        grew = true;
      }
    }
  }
  return out;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function run(argv: string[]): Promise<boolean> {
  return new Promise((resolve) => {
    execFile(
      argv[0] as string,
      argv.slice(1),
      { timeout: 10_000 },
      (error) => resolve(error === null),
    );
  });
}

/** A loopback sshd on its own port, stopped and started at will. */
interface Host {
  port: number;
  launcher: string[];
  listener: ChildProcess | undefined;
}

const dir = mkdtempSync(join(tmpdir(), "airlock-hosts-"));
const hosts: Host[] = [];

function setupProblem(): string | undefined {
  if (!SSHD) return "no sshd binary in /usr/sbin or /usr/bin";
  if (process.platform !== "linux") return "the hosts test runs on Linux";
  try {
    mkdirSync("/run/sshd", { recursive: true });
  } catch {
    if (!existsSync("/run/sshd")) {
      return "sshd needs /run/sshd (run as root, or create it)";
    }
  }
  return undefined;
}

async function makeHosts(): Promise<void> {
  // Not os.userInfo(): Bun reports "unknown" where /etc/passwd has no name.
  const user = execFileSync("id", ["-un"], { encoding: "utf8" }).trim();
  for (const name of ["host", "client"]) {
    await run([
      "ssh-keygen",
      "-q",
      "-t",
      "ed25519",
      "-N",
      "",
      "-f",
      join(dir, `${name}_ed25519`),
    ]);
  }
  writeFileSync(
    join(dir, "authorized_keys"),
    readFileSync(join(dir, "client_ed25519.pub")),
    { mode: 0o600 },
  );
  const hostKey = readFileSync(join(dir, "host_ed25519.pub"), "utf8")
    .split(" ").slice(0, 2).join(" ");
  const known: string[] = [];
  for (let index = 0; index < HOSTS; index++) {
    const port = await freePort();
    known.push(`[127.0.0.1]:${port} ${hostKey}`);
    writeFileSync(
      join(dir, `sshd_${index}.conf`),
      [
        `Port ${port}`,
        "ListenAddress 127.0.0.1",
        `HostKey ${join(dir, "host_ed25519")}`,
        `PidFile ${join(dir, `sshd_${index}.pid`)}`,
        `AuthorizedKeysFile ${join(dir, "authorized_keys")}`,
        `AllowUsers ${user}`,
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitRootLogin prohibit-password",
        "StrictModes no",
        "UsePAM no",
        "X11Forwarding no",
        "AllowTcpForwarding no",
        "PrintMotd no",
        "MaxStartups 64:30:128",
        "MaxSessions 64",
        "LogLevel ERROR",
        "",
      ].join("\n"),
    );
    hosts.push({
      port,
      listener: undefined,
      launcher: [
        "ssh",
        "-F",
        "/dev/null",
        "-T",
        "-i",
        join(dir, "client_ed25519"),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        `UserKnownHostsFile=${join(dir, "known_hosts")}`,
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-o",
        "ConnectTimeout=10",
        "-p",
        String(port),
        `${user}@127.0.0.1`,
        "--",
      ],
    });
  }
  writeFileSync(join(dir, "known_hosts"), `${known.join("\n")}\n`);
  for (let index = 0; index < HOSTS; index++) await startHost(index);
}

async function startHost(index: number): Promise<void> {
  const host = hosts[index] as Host;
  host.listener = spawn(
    SSHD as string,
    ["-D", "-f", join(dir, `sshd_${index}.conf`)],
    { stdio: "ignore" },
  );
  await until(
    () => run([...host.launcher, "true"]),
    20_000,
    `sshd ${index} on port ${host.port} to accept a login`,
  );
}

/** Kills a host's sshd, listener and connections: every session drops. */
function stopHost(index: number): void {
  const host = hosts[index] as Host;
  const listener = host.listener?.pid;
  if (listener === undefined) return;
  const sshds = descendants(listener).filter((proc) =>
    proc.comm.startsWith("sshd")
  );
  for (const pid of [listener, ...sshds.map((proc) => proc.pid)]) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // Gone already.
    }
  }
  host.listener = undefined;
}

function stopHosts(): void {
  for (let index = 0; index < hosts.length; index++) stopHost(index);
}

after(() => {
  stopHosts();
  rmSync(dir, { recursive: true, force: true });
});

const problem = setupProblem();
const skip = needs("sshd", "python3").skip ?? skipUnless(problem).skip;

describe("pool: launchers over three ssh hosts", { skip }, () => {
  test("pool() over three ssh launchers loses a host mid-run and uses it again once back, running no write twice", async () => {
    try {
      await hostsTest();
    } finally {
      stopHosts();
    }
  });
});

async function hostsTest(): Promise<void> {
  await makeHosts();
  const ledger = join(dir, "ledger");
  const p = pool<LedgerWorker>(PYTHON_ENTRY, {
    launchers: hosts.map((host) => host.launcher),
    command: [
      python.path ?? "python3",
      "-B",
      PYTHON_ENTRY,
      pythonFixture("ledger_worker.py"),
    ],
    max: 6,
    // No recycling: the host that comes back gets workers by the pool's
    // rebalancing alone.
    maxTasksPerWorker: 0,
    idempotent: ["read"],
    onStderr: () => {},
  });
  const outcomes: (true | unknown)[] = new Array(TOTAL);
  let issued = 0;
  let settled = 0;
  // How long each call takes in the worker: slower while the host is
  // lost, and at most HELD_BACK calls are left for after it is back, so
  // the 600 calls span the loss and the return whatever a start costs.
  let callMs = 5;
  let resume: () => void = () => {};
  const resumed = new Promise<void>((resolve) => resume = resolve);
  const before = new Set<number>();
  let replaced = false;
  let back = false;
  let phase: "before" | "lost" | "returning" | "done" = "before";
  const sample = () => {
    const workers = p.stats().perWorker.filter((worker) => !worker.retiring);
    if (phase === "before") {
      for (const worker of workers) before.add(worker.launcher);
    } else if (phase === "lost") {
      const others = workers.filter((worker) => worker.launcher !== LOST);
      if (others.length >= 5) replaced = true;
    } else if (phase === "returning") {
      if (workers.some((worker) => worker.launcher === LOST)) back = true;
    }
  };
  const lane = async () => {
    while (issued < TOTAL) {
      if (issued >= TOTAL - HELD_BACK && phase !== "done") await resumed;
      if (issued >= TOTAL) break;
      const id = issued++;
      const op = id % 2 === 0 ? "write" : "read";
      outcomes[id] = await p.call(op, [ledger, id, callMs]).then(
        () => true,
        (error: unknown) => error,
      );
      settled++;
      sample();
    }
  };
  const lanes = Array.from({ length: IN_FLIGHT }, lane);
  const control = (async () => {
    // The host to be lost must have served first; its first starts may have
    // been set aside for a backoff (an sshd slow to answer on a loaded
    // machine), after which the pool's rebalancing gives it workers.
    await until(
      () => {
        sample();
        return settled >= 100 && before.has(LOST);
      },
      60_000,
      "100 calls, and a worker on the host to be lost",
    );
    phase = "lost";
    callMs = 50;
    stopHost(LOST);
    await until(
      () => {
        sample();
        return replaced;
      },
      30_000,
      "the lost host's workers to be replaced on the others",
    );
    await startHost(LOST);
    phase = "returning";
    await until(
      () => {
        sample();
        return back;
      },
      30_000,
      "a worker on the host once it is back",
    );
    callMs = 5;
    phase = "done";
    resume();
  })();
  try {
    await within(
      Promise.all([...lanes, control]),
      90_000,
      "600 calls, the host's loss and return",
    );
  } finally {
    await within(p.close(), 30_000, "close()");
  }
  // Every call settled: with a value, or a crash of a call that had
  // started on the lost host (never a retry of a write).
  const runs = new Map<string, number>();
  const pids = new Set<number>();
  for (const line of readFileSync(ledger, "utf8").trim().split("\n")) {
    const [op, id, pid] = line.split(" ");
    runs.set(`${op} ${id}`, (runs.get(`${op} ${id}`) ?? 0) + 1);
    pids.add(Number(pid));
  }
  let crashed = 0;
  for (let id = 0; id < TOTAL; id++) {
    const op = id % 2 === 0 ? "write" : "read";
    const outcome = outcomes[id];
    const count = runs.get(`${op} ${id}`) ?? 0;
    if (outcome === true) {
      if (op === "write") assert.equal(count, 1, `write ${id} ran once`);
      else assert.ok(count >= 1, `read ${id} ran`);
      continue;
    }
    crashed++;
    assert.ok(outcome instanceof WorkerCrashedError, String(outcome));
    if (op === "write") {
      assert.equal(outcome.executed, "maybe", `write ${id}`);
      assert.ok(count <= 1, `write ${id} ran at most once (${count})`);
    }
  }
  for (const [key, count] of runs) {
    if (key.startsWith("write")) assert.equal(count, 1, `${key} ran once`);
  }
  assert.equal(outcomes.filter((o) => o !== undefined).length, TOTAL);
  assert.ok(
    crashed < 24,
    `${crashed} calls failed, only those on the lost host`,
  );
  process.stderr.write(
    `hosts: ${TOTAL} calls, ${crashed} failed with the lost host, ` +
      `${pids.size} worker processes\n`,
  );
  // No worker process left on any host, nor an sshd session.
  await until(
    () => [...pids].every((pid) => !isAlive(pid)),
    15_000,
    "every worker process on every host to exit",
  );
  await until(
    () =>
      hosts.every((host) =>
        host.listener?.pid === undefined ||
        descendants(host.listener.pid).length === 0
      ),
    15_000,
    "every ssh session to end",
  );
}
