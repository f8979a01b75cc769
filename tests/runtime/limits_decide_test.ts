import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  decideLimits,
  type LimitsFacts,
} from "../../src/runtime/sandbox/limits/decide.ts";
import type { ResolvedLimits } from "../../src/runtime/sandbox/limits/types.ts";
import { prlimitArgs } from "../../src/runtime/sandbox/limits/wrapper.ts";
import { resolveLimits } from "../../src/parent/_resolve_options.ts";
import { DEFAULTS } from "../../src/parent/options.ts";
import { WorkerCrashedError } from "../../mod.ts";

const all: LimitsFacts = {
  local: true,
  cgroup: { memory: true, pids: true },
  prlimit: "/usr/bin/prlimit",
};
const noCgroup: LimitsFacts = {
  ...all,
  cgroup: { error: "a Deno parent reads /proc only with --allow-all (-A)" },
};
const noPrlimit: LimitsFacts = {
  ...all,
  prlimit: { error: "prlimit (util-linux) is not installed" },
};
const remote: LimitsFacts = { ...all, local: false };

function limits(given: Partial<ResolvedLimits>): ResolvedLimits {
  return { ...resolveLimits(undefined), ...given };
}

describe("decideLimits()", () => {
  const every = limits({
    memoryBytes: 2 ** 28,
    processes: 64,
    processesGiven: true,
    cpuSeconds: 5,
    fileSizeBytes: 2 ** 20,
    openFiles: 64,
  });
  const cases: [
    string,
    ResolvedLimits,
    LimitsFacts,
    string | Record<string, string>,
  ][] = [
    ["every limit, every mechanism", every, all, {
      memoryBytes: "cgroup",
      processes: "cgroup",
      cpuSeconds: "rlimit",
      fileSizeBytes: "rlimit",
      openFiles: "rlimit",
    }],
    [
      "nothing given: the default processes limit in a cgroup",
      limits({}),
      all,
      {
        memoryBytes: "none",
        processes: "cgroup",
        cpuSeconds: "none",
        fileSizeBytes: "none",
        openFiles: "none",
      },
    ],
    [
      "nothing given, no cgroup: the default is not held, and no refusal",
      limits({}),
      noCgroup,
      {
        memoryBytes: "none",
        processes: "none",
        cpuSeconds: "none",
        fileSizeBytes: "none",
        openFiles: "none",
      },
    ],
    [
      "memory without a cgroup, strict",
      limits({ memoryBytes: 2 ** 28 }),
      noCgroup,
      'memoryBytes: limits.memoryBytes needs a cgroup with the memory controller, and none can be had here: a Deno parent reads /proc only with --allow-all (-A); or pass limits.enforce "best-effort" to start without it',
    ],
    [
      "processes given without a cgroup, strict",
      limits({ processes: 64, processesGiven: true }),
      noCgroup,
      'processes: limits.processes needs a cgroup with the pids controller, and none can be had here: a Deno parent reads /proc only with --allow-all (-A); or pass limits.enforce "best-effort" to start without it',
    ],
    [
      "cpu without prlimit, strict",
      limits({ cpuSeconds: 1 }),
      noPrlimit,
      'cpuSeconds: limits.cpuSeconds needs an rlimit set before the worker runs, and it cannot be set here: prlimit (util-linux) is not installed; or pass limits.enforce "best-effort" to start without it',
    ],
    [
      "a launcher, strict",
      limits({ openFiles: 10 }),
      remote,
      'openFiles: limits.openFiles cannot be enforced on a worker run through a launcher (it runs on the other side); set the limit there, or pass limits.enforce "best-effort" to start without it',
    ],
    [
      "every limit without a cgroup, best-effort",
      { ...every, enforce: "best-effort" },
      noCgroup,
      {
        memoryBytes: "none",
        processes: "none",
        cpuSeconds: "rlimit",
        fileSizeBytes: "rlimit",
        openFiles: "rlimit",
      },
    ],
    ["a launcher, best-effort", { ...every, enforce: "best-effort" }, remote, {
      memoryBytes: "none",
      processes: "none",
      cpuSeconds: "none",
      fileSizeBytes: "none",
      openFiles: "none",
    }],
  ];
  for (const [name, given, facts, expected] of cases) {
    test(`decideLimits(): ${name}`, () => {
      const plan = decideLimits(given, facts);
      if (typeof expected === "string") {
        assert.ok("error" in plan, "a refusal");
        assert.equal(`${plan.limit}: ${plan.error}`, expected);
      } else {
        assert.ok(!("error" in plan), "a plan");
        assert.deepEqual(plan.mechanisms, expected);
      }
    });
  }

  test("decideLimits() puts what a cgroup holds in the group and the rest in rlimits", () => {
    const plan = decideLimits(every, all);
    assert.ok(!("error" in plan));
    assert.deepEqual(plan.cgroup, { memoryBytes: 2 ** 28, processes: 64 });
    assert.deepEqual(plan.rlimits, {
      cpuSeconds: 5,
      fileSizeBytes: 2 ** 20,
      openFiles: 64,
    });
    assert.deepEqual(prlimitArgs(plan.rlimits), [
      "--cpu=5:6",
      "--fsize=1048576:1048576",
      "--nofile=64:64",
    ]);
    const none = decideLimits(limits({}), noCgroup);
    assert.ok(!("error" in none));
    assert.equal(none.cgroup, undefined);
  });
});

describe("resolveLimits()", () => {
  test("resolveLimits() fills the default processes limit and strict", () => {
    assert.deepEqual(resolveLimits(undefined), {
      memoryBytes: undefined,
      processes: DEFAULTS.limits.processes,
      processesGiven: false,
      cpuSeconds: undefined,
      fileSizeBytes: undefined,
      openFiles: undefined,
      enforce: "strict",
    });
    assert.ok(DEFAULTS.limits.processes >= 512);
  });

  test("resolveLimits() refuses wrong types and ranges, naming the option and the value", () => {
    const cases: [unknown, ErrorConstructor, RegExp][] = [
      ["lots", TypeError, /"limits": expected an object, received "lots"/],
      [
        { memoryByte: 1 },
        TypeError,
        /"memoryByte": limits has no such option; known options: memoryBytes, processes/,
      ],
      [
        { memoryBytes: "1G" },
        TypeError,
        /"limits.memoryBytes": expected a whole number, received "1G"/,
      ],
      [
        { memoryBytes: 256 },
        RangeError,
        /"limits.memoryBytes": expected a whole number ≥ 1048576, received 256/,
      ],
      [
        { processes: 0 },
        RangeError,
        /"limits.processes": expected a whole number ≥ 1, received 0/,
      ],
      [
        { cpuSeconds: 0.5 },
        RangeError,
        /"limits.cpuSeconds": expected a whole number ≥ 1, received 0.5/,
      ],
      [{ fileSizeBytes: -1 }, RangeError, /"limits.fileSizeBytes"/],
      [{ openFiles: Infinity }, RangeError, /"limits.openFiles"/],
      [
        { enforce: "loose" },
        RangeError,
        /"limits.enforce": expected "strict" or "best-effort", received "loose"/,
      ],
    ];
    for (const [value, type, message] of cases) {
      assert.throws(() => resolveLimits(value), (error: unknown) => {
        assert.ok(error instanceof type, `${JSON.stringify(value)}`);
        assert.match((error as Error).message, message);
        return true;
      });
    }
  });
});

describe("WorkerCrashedError limit", () => {
  test("WorkerCrashedError names the limit that ended the worker, and only then", () => {
    const error = new WorkerCrashedError({
      module: "db.ts",
      pid: 7,
      exitCode: null,
      signal: "SIGKILL",
      op: "fill",
      limit: "memoryBytes",
    });
    assert.equal(error.limit, "memoryBytes");
    assert.equal(error.hint, undefined);
    assert.equal(
      error.message,
      'Call "fill" failed: worker "db.ts" (pid 7) was ended by the kernel at its memory limit (limits.memoryBytes; SIGKILL)',
    );
    const plain = new WorkerCrashedError({
      module: "db.ts",
      exitCode: null,
      signal: "SIGKILL",
    });
    assert.equal(plain.limit, undefined);
    assert.match(plain.message, /out-of-memory killer/);
  });
});
