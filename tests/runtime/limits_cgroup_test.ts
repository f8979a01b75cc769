import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { spawn } from "node:child_process";
import type { CgroupContext } from "../../src/runtime/sandbox/limits/cgroup.ts";
import {
  type CgroupFs,
  REAL_CGROUP_FS,
} from "../../src/runtime/sandbox/limits/cgroup_fs.ts";
import { cgroupPlaces } from "../../src/runtime/sandbox/limits/cgroup_host.ts";
import { cgroupV1 } from "../../src/runtime/sandbox/limits/cgroup_v1.ts";
import { cgroupV2 } from "../../src/runtime/sandbox/limits/cgroup_v2.ts";
import {
  cgroupBackend,
  openCgroupBackend,
  parseProcStat,
} from "../../src/runtime/sandbox/limits/open_cgroups.ts";
import { scratchDir } from "../_helpers/files.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { skipUnless } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const dir = scratchDir("cgroups");
after(() => dir[Symbol.dispose]());

/**
 * A cgroup hierarchy (v2, or v1 with its tasks files) simulated by plain files: control files are files
 * the test writes first, a group is a directory, removing a group removes
 * its files unless it holds a group or its cgroup.procs lists a process (as
 * the kernel refuses).
 */
function treeFs(): CgroupFs {
  return {
    ...REAL_CGROUP_FS,
    mkdir: (path) => {
      mkdirSync(path);
      writeFileSync(`${path}/cgroup.procs`, "");
      writeFileSync(`${path}/tasks`, ""); // v1's
      writeFileSync(`${path}/memory.swap.max`, "max");
    },
    rmdir: (path) => {
      const groups = readdirSync(path, { withFileTypes: true })
        .filter((entry) => entry.isDirectory());
      if (
        groups.length > 0 ||
        readFileSync(`${path}/cgroup.procs`, "utf8").trim() !== ""
      ) {
        throw Object.assign(new Error("busy"), { code: "EBUSY" });
      }
      rmSync(path, { recursive: true });
    },
  };
}

function treeContext(fs: CgroupFs, pid = 4242): CgroupContext {
  return {
    fs,
    pid,
    start: "777",
    kill: () => {},
    alive: (other) => other === pid,
  };
}

/** A delegated v2 group holding only the parent (pid 4242). */
function v2Tree(name: string, procs = "4242\n"): string {
  const root = dir.join(name);
  mkdirSync(root);
  writeFileSync(`${root}/cgroup.controllers`, "cpu memory pids\n");
  writeFileSync(`${root}/cgroup.subtree_control`, "\n");
  writeFileSync(`${root}/cgroup.procs`, procs);
  return root;
}

describe("cgroup v2 backend (against a tree in a temporary directory)", () => {
  test("cgroupV2() moves the parent into a leaf, enables memory and pids, makes a limited group per worker", () => {
    const root = v2Tree("v2-basic");
    const fs = treeFs();
    const backend = cgroupV2(root, treeContext(fs));
    assert.equal(backend.version, 2);
    assert.ok(backend.memory && backend.pids);
    assert.equal(
      readFileSync(`${root}/airlock-4242-777/cgroup.procs`, "utf8"),
      "4242",
    );
    assert.equal(
      readFileSync(`${root}/cgroup.subtree_control`, "utf8"),
      "+memory +pids",
    );
    const group = backend.create({ memoryBytes: 2 ** 28, processes: 64 });
    const worker = `${root}/airlock-4242-777-w1`;
    assert.deepEqual(group.join, [`${worker}/cgroup.procs`]);
    assert.equal(readFileSync(`${worker}/memory.max`, "utf8"), "268435456");
    assert.equal(readFileSync(`${worker}/memory.swap.max`, "utf8"), "0");
    assert.equal(readFileSync(`${worker}/pids.max`, "utf8"), "64");
    writeFileSync(
      `${worker}/memory.events`,
      "low 0\nmax 3\noom 1\noom_kill 1\n",
    );
    writeFileSync(`${worker}/memory.current`, "1234\n");
    writeFileSync(`${worker}/pids.events`, "max 7\n");
    assert.equal(group.processesRefused(), 7);
    assert.equal(group.oomKills(), 1);
    assert.equal(group.memoryBytes(), 1234);
    assert.equal(group.remove(), true);
    assert.equal(existsSync(worker), false);
    assert.equal(group.remove(), true);
  });

  test("cgroupV2() in two copies of airlock in one process gives their workers distinct groups", () => {
    const root = v2Tree("v2-twice");
    const fs = treeFs();
    const one = cgroupV2(root, treeContext(fs));
    const two = cgroupV2(root, treeContext(fs));
    const a = one.create({ memoryBytes: undefined, processes: 8 });
    const b = two.create({ memoryBytes: undefined, processes: 8 });
    assert.notDeepEqual(a.join, b.join);
    assert.ok(a.remove() && b.remove());
  });

  test("cgroupV2() refuses a group shared with other processes, naming them and the fix", () => {
    const root = v2Tree("v2-shared", "4242\n99\n");
    assert.throws(
      () => cgroupV2(root, treeContext(treeFs())),
      /holds other processes \(pids 99\).*Delegate=yes/,
    );
    assert.equal(existsSync(`${root}/airlock-4242-777`), false);
  });

  test("cgroupV2() refuses a group without the memory or pids controller", () => {
    const root = v2Tree("v2-none");
    writeFileSync(`${root}/cgroup.controllers`, "cpu io\n");
    assert.throws(
      () => cgroupV2(root, treeContext(treeFs())),
      /no memory or pids controller.*"cpu io"/,
    );
  });

  test("cgroupV2() removes the groups of a dead parent, keeps a live one's", () => {
    const root = v2Tree("v2-stale");
    const fs = treeFs();
    for (const name of ["airlock-1-5-w3", "airlock-1-5", "airlock-4242-1-w1"]) {
      fs.mkdir(`${root}/${name}`);
    }
    // A group of a dead parent that still holds a process stays.
    fs.mkdir(`${root}/airlock-2-5-w1`);
    writeFileSync(`${root}/airlock-2-5-w1/cgroup.procs`, "31\n");
    const context = { ...treeContext(fs), alive: () => false };
    cgroupV2(root, context);
    const left = readdirSync(root).filter((name) => name.startsWith("airlock"));
    assert.deepEqual(left.sort(), [
      "airlock-2-5-w1",
      "airlock-4242-1-w1",
      "airlock-4242-777",
    ]);
  });

  test("openCgroupBackend() prefers v2 with controllers, says why when neither works", () => {
    const root = v2Tree("v2-open");
    const fs = treeFs();
    const backend = openCgroupBackend({ v1: {}, v2: root }, treeContext(fs));
    assert.ok(!("error" in backend));
    assert.equal(backend.version, 2);
    const shared = v2Tree("v2-open-shared", "1\n4242\n");
    const none = openCgroupBackend(
      { v1: { memory: dir.join("no-such-v1") }, v2: shared },
      treeContext(fs),
    );
    assert.ok("error" in none);
    assert.match(
      none.error,
      /cgroup v2: .*other processes.*cgroup v1: cannot create the group/,
    );
  });
});

describe("cgroup v1 backend (against a tree in a temporary directory)", () => {
  test("cgroupV1() removes a worker's groups when one hierarchy releases the killed process later than the other", () => {
    const memory = dir.join("v1-memory");
    const pids = dir.join("v1-pids");
    mkdirSync(memory);
    mkdirSync(pids);
    const fs = treeFs();
    const backend = cgroupV1({ memory, pids }, treeContext(fs));
    const group = backend.create({ memoryBytes: 2 ** 27, processes: 16 });
    // The step joins through each group's tasks file (one thread, no
    // grace period); the group lists its processes in cgroup.procs.
    const [memoryTasks = "", pidsTasks = ""] = group.join;
    assert.ok(memoryTasks.startsWith(memory) && pidsTasks.startsWith(pids));
    assert.ok(memoryTasks.endsWith("/tasks") && pidsTasks.endsWith("/tasks"));
    const memoryProcs = memoryTasks.replace(/tasks$/, "cgroup.procs");
    const pidsProcs = pidsTasks.replace(/tasks$/, "cgroup.procs");
    // The killed worker is gone from pids at once; memory holds it until
    // it is reaped, as the kernel does.
    writeFileSync(memoryProcs, "31\n");
    assert.equal(group.remove(), false);
    assert.equal(existsSync(pidsProcs), false);
    writeFileSync(memoryProcs, "");
    assert.equal(group.remove(), true);
    assert.equal(existsSync(memoryProcs), false);
    assert.equal(group.remove(), true);
  });

  test("cgroupV1(): one copy of airlock closing leaves another copy's worker groups in the shared parent group", () => {
    const memory = dir.join("v1-two-memory");
    const pids = dir.join("v1-two-pids");
    mkdirSync(memory);
    mkdirSync(pids);
    const fs = treeFs();
    const one = cgroupV1({ memory, pids }, treeContext(fs));
    const two = cgroupV1({ memory, pids }, treeContext(fs));
    const group = one.create({ memoryBytes: 2 ** 27, processes: 16 });
    // Made, not yet joined: the start that made it is on its way.
    two.close();
    for (const procs of group.join) assert.equal(existsSync(procs), true);
    one.close();
    assert.deepEqual(readdirSync(memory), []);
    assert.deepEqual(readdirSync(pids), []);
  });
});

describe("cgroup places", () => {
  test("cgroupPlaces() maps a hybrid host's groups through their mounts (a bind of a subtree too)", () => {
    const mountinfo = [
      "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory",
      "31 25 0:27 /ctr /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids",
      "32 25 0:28 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw,nsdelegate",
      "33 25 0:29 / /tmp rw - tmpfs tmpfs rw",
    ].join("\n");
    assert.deepEqual(
      cgroupPlaces(mountinfo, "8:pids:/ctr/a\n4:memory:/x/y\n0::/u\n"),
      {
        v1: {
          memory: "/sys/fs/cgroup/memory/x/y",
          pids: "/sys/fs/cgroup/pids/a",
        },
        v2: "/sys/fs/cgroup/unified/u",
      },
    );
    // A group outside what the mount shows cannot be reached through it.
    assert.deepEqual(cgroupPlaces(mountinfo, "8:pids:/other\n"), {
      v1: {},
      v2: undefined,
    });
  });

  test("parseProcStat() reads the pid and start time past a command with spaces and parentheses", () => {
    const fields = Array.from({ length: 50 }, (_, i) => String(i + 3));
    fields[19] = "123456";
    assert.deepEqual(
      parseProcStat(`77 (a) b (c)) ${fields.join(" ")}`),
      { pid: 77, start: "123456" },
    );
  });
});

/** Whether this process may make groups in the v1 memory and pids hierarchies. */
function v1Here(): string | undefined {
  if (process.platform !== "linux") return "cgroups are Linux only";
  const backend = cgroupBackend(RUNTIME);
  if ("error" in backend) return `no cgroup here: ${backend.error}`;
  if (backend.version !== 1) return "this host has cgroup v2";
  return undefined;
}

describe("cgroup v1 backend (for real)", skipUnless(v1Here()), () => {
  test("cgroupV1() makes a limited group a process joins before it runs, and remove() ends what is left and removes it", async () => {
    const backend = cgroupBackend(RUNTIME);
    assert.ok(!("error" in backend));
    assert.ok(backend.memory && backend.pids);
    const group = backend.create({ memoryBytes: 2 ** 27, processes: 16 });
    const files = group.join.map((file) =>
      file.replace(/\/(cgroup\.procs|tasks)$/, "")
    );
    assert.equal(files.length, 2);
    const memory = files.find((file) => file.includes("/memory/")) ?? "";
    const pids = files.find((file) => file.includes("/pids/")) ?? "";
    assert.equal(
      readFileSync(`${memory}/memory.limit_in_bytes`, "utf8").trim(),
      String(2 ** 27),
    );
    assert.equal(readFileSync(`${pids}/pids.max`, "utf8").trim(), "16");
    const script = group.join.map((file) => `echo 0 > ${file}`).join(" && ");
    const child = spawn("/bin/sh", ["-c", `${script} && exec sleep 60`], {
      stdio: "ignore",
    });
    const pid = child.pid ?? 0;
    await until(
      () => readFileSync(`${pids}/cgroup.procs`, "utf8").trim() === String(pid),
      30_000,
      "the child in its group",
    );
    assert.match(
      readFileSync(`/proc/${pid}/cgroup`, "utf8"),
      /:memory:.*\/w\d+$/m,
    );
    assert.ok((group.memoryBytes() ?? 0) > 0);
    assert.equal(group.oomKills(), 0);
    const exited = new Promise((resolve) => child.once("exit", resolve));
    // The worker is gone and this process outlived it: remove() ends it
    // (and removes the group at once, or once the process is reaped).
    group.remove();
    await exited;
    await until(() => !isAlive(pid), 30_000, "the child gone");
    await until(() => group.remove(), 30_000, "the group removed");
    assert.equal(existsSync(memory), false);
    assert.equal(existsSync(pids), false);
  });

  test("cgroupV1() in two copies of airlock in one process gives their workers distinct groups", () => {
    const backend = cgroupBackend(RUNTIME);
    assert.ok(!("error" in backend) && backend.version === 1);
    const places = (() => {
      const group = backend.create({ memoryBytes: undefined, processes: 8 });
      const dirs = group.join.map((file) =>
        file.replace(/\/airlock-[^/]+\/w\d+\/(cgroup\.procs|tasks)$/, "")
      );
      group.remove();
      return dirs;
    })();
    const stat = readFileSync("/proc/self/stat", "utf8");
    const context: CgroupContext = {
      fs: REAL_CGROUP_FS,
      pid: process.pid,
      start: parseProcStat(stat)?.start ?? "",
      kill: () => {},
      alive: () => true,
    };
    const second = cgroupV1({
      memory: places.find((dir) => dir.includes("/memory")),
      pids: places.find((dir) => dir.includes("/pids")),
    }, context);
    const a = backend.create({ memoryBytes: undefined, processes: 8 });
    const b = second.create({ memoryBytes: undefined, processes: 8 });
    assert.equal(a.join.length, 2);
    assert.notDeepEqual(a.join, b.join);
    assert.ok(a.remove() && b.remove());
  });

  test("cgroupV1() removes the groups of a dead parent beside its own", async () => {
    const backend = cgroupBackend(RUNTIME);
    assert.ok(!("error" in backend) && backend.version === 1);
    const group = backend.create({ memoryBytes: undefined, processes: 8 });
    const pids = (group.join.find((file) => file.includes("/pids/")) ?? "")
      .replace(/\/airlock-[^/]+\/w\d+\/(cgroup\.procs|tasks)$/, "");
    const stale = `${pids}/airlock-999999999-1`;
    mkdirSync(`${stale}/w1`, { recursive: true });
    const context: CgroupContext = {
      fs: REAL_CGROUP_FS,
      pid: process.pid,
      start: "0",
      kill: () => {},
      // Only the planted parent is dead: the groups of the other parents on
      // this machine (test files running beside this one) are left alone.
      alive: (pid, start) => !(pid === 999_999_999 && start === "1"),
    };
    const other = cgroupV1({ pids }, context);
    await until(() => !existsSync(stale), 10_000, "the stale group removed");
    assert.equal(other.pids, true);
    try {
      REAL_CGROUP_FS.rmdir(`${pids}/airlock-${process.pid}-0`);
    } catch (error) {
      // Already removed as stale by another parent (its start time is not
      // this process's).
      if ((error as { code?: string }).code !== "ENOENT") throw error;
    }
    assert.equal(group.remove(), true);
  });
});
