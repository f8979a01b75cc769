// sandboxPlan() is the one decision of the OS sandbox: which backends
// confine a worker, from its options and the host facts, or the
// PermissionError it cannot start with. Pure, so every case is a row here.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { PermissionError } from "../../src/errors.ts";
import { resolvePermissions } from "../../src/runtime/permissions.ts";
import {
  type HostFacts,
  needsHostFacts,
  sandboxPlan,
  type SandboxRequest,
} from "../../src/runtime/sandbox/plan.ts";

const nothing = resolvePermissions(undefined, "/app");
const ffi = resolvePermissions({ ffi: true }, "/app");
const run = resolvePermissions({ run: ["git"] }, "/app");
const readOnly = resolvePermissions({ read: ["./data"] }, "/app");
const all = resolvePermissions("all", "/app");
const bestEffort = resolvePermissions({
  read: ["./data"],
  enforce: "best-effort",
}, "/app");
const bestEffortNothing = resolvePermissions({ enforce: "best-effort" }, "/");
const db = resolvePermissions({ net: ["db.internal:5432"] }, "/app");
const dbBestEffort = resolvePermissions({
  net: ["db.internal:5432"],
  enforce: "best-effort",
}, "/app");
const noPort = resolvePermissions({ net: ["db.internal"] }, "/app");
const wholeNet = resolvePermissions({ net: true }, "/app");
const metadataStrict = resolvePermissions(
  { read: ["./data"], metadata: "strict" },
  "/app",
);

const step = (
  landlockAbi: number,
  seccomp = true,
): HostFacts["confineStep"] => ({
  runner: { runtime: "bun", binary: "/usr/bin/bun" },
  stepEnv: {},
  support: { landlockAbi, seccomp },
});
const linux: HostFacts = {
  platform: "linux",
  bwrap: { path: "/usr/bin/bwrap" },
  confineStep: undefined,
};
const noBwrap: HostFacts = {
  platform: "linux",
  bwrap: undefined,
  confineStep: undefined,
};
const mac: HostFacts = {
  platform: "darwin",
  bwrap: undefined,
  confineStep: undefined,
};
/** Both backends, Landlock with every feature. */
const both: HostFacts = { ...linux, confineStep: step(6) };
/** bubblewrap, and a kernel without Landlock: the step installs seccomp alone. */
const bwrapSeccompStep: HostFacts = { ...linux, confineStep: step(0) };
const landlockAlone: HostFacts = { ...noBwrap, confineStep: step(6) };
const neither: HostFacts = {
  platform: "linux",
  bwrap: { unusable: "bwrap: No permissions to create new namespace" },
  // ABI 5 lacks signal scoping (ABI 6): not alone.
  confineStep: step(5),
};
const noLandlock: HostFacts = { ...noBwrap, confineStep: step(0) };
/** The same facts on a machine airlock has a native confine step for. */
const native = (facts: HostFacts): HostFacts => ({
  ...facts,
  nativeStep: true,
});
// Landlock is here but refused (its confine step under a write grant).
const refused = {
  unavailable:
    'the confine step\'s "/c/deno/airlock-confine" lies under "/c/deno", which a worker may write; keep write grants away from airlock, the runtime and its caches',
  refused: true,
};

/** One row: the request, the facts, and the plan or the error. */
interface Case {
  request: Omit<SandboxRequest, "module" | "local" | "compiledDeno"> & {
    local?: boolean;
    compiledDeno?: boolean;
  };
  facts: HostFacts;
  /** `confined:<backends>` (outermost first, `+seccomp:<who>`), `unconfined`, or `error:<permission>`. */
  expect: string;
  says?: RegExp[];
  saysNot?: RegExp[];
}
const deno = "deno" as const;
const bun = "bun" as const;
const command = "command" as const;

const cases: Case[] = [
  // permissions.metadata "strict" (issue 24, item 5): only under bubblewrap,
  // whose read-only mounts refuse the descriptor forms too.
  {
    request: { runtime: bun, sandbox: "auto", permissions: metadataStrict },
    facts: landlockAlone,
    expect: "error:sandbox",
    says: [/permissions\.metadata "strict"/, /fchmod/],
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: metadataStrict },
    facts: both,
    expect: "confined:bwrap,landlock+seccomp:step",
  },
  // auto on Deno: the sandbox wherever it is available, whatever is granted.
  ...[nothing, readOnly, ffi, run].map((permissions): Case => ({
    request: { runtime: deno, sandbox: "auto", permissions },
    facts: linux,
    expect: "confined:bwrap+seccomp:bwrap",
  })),
  // auto on Deno where it is missing: Deno's own permissions.
  ...[noBwrap, mac].map((facts): Case => ({
    request: { runtime: deno, sandbox: "auto", permissions: ffi },
    facts,
    expect: "unconfined",
    says: [/Deno's flags enforce the permissions on JavaScript/],
  })),
  // auto on Bun: always the sandbox where bwrap is.
  ...[nothing, readOnly].map((permissions): Case => ({
    request: { runtime: bun, sandbox: "auto", permissions },
    facts: linux,
    expect: "confined:bwrap+seccomp:bwrap",
  })),
  // Bun without a sandbox: an error unless best-effort or all.
  ...[noBwrap, mac].flatMap((facts): Case[] => [
    {
      request: { runtime: bun, sandbox: "auto", permissions: nothing },
      facts,
      expect: "error:permissions",
      // It says how to fix it.
      says: [/best-effort/, /"all"/],
      saysNot: [/\.$/],
    },
    {
      request: { runtime: bun, sandbox: "auto", permissions: readOnly },
      facts,
      expect: "error:permissions",
    },
    {
      request: { runtime: bun, sandbox: "auto", permissions: bestEffort },
      facts,
      expect: "unconfined",
    },
    {
      request: { runtime: bun, sandbox: "auto", permissions: all },
      facts,
      expect: "unconfined",
    },
  ]),
  {
    request: { runtime: bun, sandbox: "none", permissions: nothing },
    facts: linux,
    expect: "error:permissions",
  },
  {
    request: { runtime: bun, sandbox: "none", permissions: bestEffort },
    facts: linux,
    expect: "unconfined",
  },
  // "os": the sandbox, or an error saying what is missing.
  {
    request: { runtime: deno, sandbox: "os", permissions: nothing },
    facts: linux,
    expect: "confined:bwrap+seccomp:bwrap",
  },
  {
    request: { runtime: bun, sandbox: "os", permissions: bestEffort },
    facts: linux,
    expect: "confined:bwrap+seccomp:bwrap",
  },
  {
    request: { runtime: deno, sandbox: "os", permissions: nothing },
    facts: noBwrap,
    expect: "error:sandbox",
    says: [/bwrap/],
  },
  {
    request: { runtime: bun, sandbox: "os", permissions: bestEffort },
    facts: mac,
    expect: "error:sandbox",
  },
  {
    request: { runtime: deno, sandbox: "os", permissions: nothing },
    facts: mac,
    expect: "error:sandbox",
    says: [/"darwin"/],
  },
  // "none" never sandboxes Deno.
  {
    request: { runtime: deno, sandbox: "none", permissions: ffi },
    facts: both,
    expect: "unconfined",
  },
  // permissions "all" needs no sandbox and contradicts "os".
  ...[deno, bun].map((runtime): Case => ({
    request: { runtime, sandbox: "auto", permissions: all },
    facts: both,
    expect: "unconfined",
  })),
  {
    request: { runtime: deno, sandbox: "os", permissions: all },
    facts: linux,
    expect: "error:sandbox",
  },
  // Both backends: Landlock (the confine step, with seccomp) inside
  // bubblewrap; without Landlock in the kernel the step installs seccomp.
  ...[deno, bun, command].flatMap((runtime): Case[] => [
    {
      request: { runtime, sandbox: "auto", permissions: readOnly },
      facts: both,
      expect: "confined:bwrap,landlock+seccomp:step",
    },
    {
      request: { runtime, sandbox: "auto", permissions: readOnly },
      facts: bwrapSeccompStep,
      expect: "confined:bwrap+seccomp:step",
    },
  ]),
  // An ABI gap under bubblewrap: both still run (bubblewrap covers it).
  {
    request: { runtime: bun, sandbox: "auto", permissions: readOnly },
    facts: { ...linux, confineStep: step(3) },
    expect: "confined:bwrap,landlock+seccomp:step",
  },
  // A kernel with Landlock but no seccomp: bubblewrap alone (its --seccomp).
  {
    request: { runtime: bun, sandbox: "auto", permissions: readOnly },
    facts: { ...linux, confineStep: step(6, false) },
    expect: "confined:bwrap+seccomp:bwrap",
  },
  // Landlock: the sandbox where it can confine alone.
  ...[deno, bun].map((runtime): Case => ({
    request: { runtime, sandbox: "auto", permissions: readOnly },
    facts: landlockAlone,
    expect: "confined:landlock+seccomp:step",
  })),
  // ... but not alone with a gap the grants need (net scopes below ABI 4).
  {
    request: {
      runtime: bun,
      sandbox: "os",
      permissions: resolvePermissions({ net: ["db:5432"] }, "/app"),
    },
    facts: { ...noBwrap, confineStep: step(3) },
    expect: "error:sandbox",
    says: [/Landlock ABI 3 lacks TCP port rules \(net scopes\) \(ABI 4\)/],
  },
  // Neither backend: fails closed naming both.
  {
    request: { runtime: bun, sandbox: "auto", permissions: readOnly },
    facts: neither,
    expect: "error:permissions",
    says: [
      /bwrap: No permissions to create new namespace/,
      /Landlock ABI 5 lacks signal scoping \(ABI 6\)/,
    ],
  },
  {
    request: { runtime: bun, sandbox: "os", permissions: readOnly },
    facts: noLandlock,
    expect: "error:sandbox",
    says: [/the kernel has no Landlock/],
  },
  // A backend that exists but was refused, with no bubblewrap: an error
  // for Deno as for Bun, under "auto" and "os", naming it, the cause and
  // the fix (never a silent fall back to Deno's flags).
  ...(["auto", "os"] as const).flatMap((sandbox): Case[] => [
    {
      request: { runtime: deno, sandbox, permissions: readOnly },
      facts: { ...noBwrap, confineStep: refused },
      expect: "error:sandbox",
      says: [
        /bubblewrap \("bwrap"\) was not found/,
        /the Landlock backend, which this machine has, was refused: the confine step's "\/c\/deno\/airlock-confine" lies under "\/c\/deno"/,
        /make bubblewrap usable/,
        /sandbox "none" or permissions\.enforce "best-effort"/,
      ],
      saysNot: [/\.$/],
    },
    {
      request: { runtime: bun, sandbox, permissions: readOnly },
      facts: { ...neither, confineStep: refused },
      expect: "error:sandbox",
      says: [
        /bwrap: No permissions to create new namespace/,
        /was refused: the confine step's/,
        /permissions\.enforce "best-effort"/,
      ],
      saysNot: [/sandbox "none"/],
    },
  ]),
  // A failed probe is a refusal too.
  {
    request: { runtime: deno, sandbox: "auto", permissions: readOnly },
    facts: {
      ...noBwrap,
      confineStep: {
        unavailable: "the confine step's probe failed: exit code 1",
        refused: true,
      },
    },
    expect: "error:sandbox",
    says: [/was refused: the confine step's probe failed/],
  },
  // ... opted out explicitly: "none" (Deno) or best-effort.
  {
    request: { runtime: deno, sandbox: "none", permissions: readOnly },
    facts: { ...noBwrap, confineStep: refused },
    expect: "unconfined",
  },
  ...[deno, bun].map((runtime): Case => ({
    request: { runtime, sandbox: "auto", permissions: bestEffort },
    facts: { ...noBwrap, confineStep: refused },
    expect: "unconfined",
  })),
  // ... where bubblewrap runs: it confines alone, seccomp by bubblewrap.
  ...[deno, bun].map((runtime): Case => ({
    request: { runtime, sandbox: "auto", permissions: readOnly },
    facts: { ...linux, confineStep: refused },
    expect: "confined:bwrap+seccomp:bwrap",
  })),
  // No backend on this machine (Landlock missing, not refused): Deno's
  // flags under "auto", as documented.
  {
    request: { runtime: deno, sandbox: "auto", permissions: readOnly },
    facts: noLandlock,
    expect: "unconfined",
  },
  // A command worker is named as such.
  {
    request: { runtime: command, sandbox: "auto", permissions: readOnly },
    facts: noLandlock,
    expect: "error:permissions",
    says: [/^A command worker has no permission model/],
  },
  // Best effort where bubblewrap cannot run and Landlock has a gap: a Bun
  // or command worker is confined as far as Landlock goes, not at all
  // otherwise; never Deno (its flags), never "none" or "all".
  ...[bun, command].map((runtime): Case => ({
    request: { runtime, sandbox: "auto", permissions: bestEffortNothing },
    facts: neither,
    expect: "confined:landlock+seccomp:step",
    says: [/as far as it goes/],
  })),
  {
    request: { runtime: deno, sandbox: "auto", permissions: bestEffortNothing },
    facts: neither,
    expect: "unconfined",
  },
  {
    request: { runtime: bun, sandbox: "none", permissions: bestEffortNothing },
    facts: neither,
    expect: "unconfined",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: bestEffortNothing },
    facts: { ...neither, confineStep: refused },
    expect: "unconfined",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: bestEffortNothing },
    facts: { ...neither, confineStep: step(0) },
    expect: "unconfined",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: bestEffortNothing },
    facts: { ...neither, bwrap: { path: "/usr/bin/bwrap" } },
    expect: "confined:bwrap,landlock+seccomp:step",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: nothing },
    facts: neither,
    expect: "error:permissions",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: all },
    facts: neither,
    expect: "unconfined",
  },
  // Through a launcher: the remote side's job, whatever the options.
  ...[deno, bun, command].map((runtime): Case => ({
    request: { runtime, sandbox: "os", permissions: nothing, local: false },
    facts: both,
    expect: "unconfined",
    says: [/launcher/],
  })),
  // A deno compile'd program (confined as Bun) names its own fix.
  {
    request: {
      runtime: bun,
      sandbox: "auto",
      permissions: nothing,
      compiledDeno: true,
    },
    facts: mac,
    expect: "error:permissions",
    says: [/deno compile/, /compiled-in permissions/],
  },
  {
    request: {
      runtime: bun,
      sandbox: "os",
      permissions: nothing,
      compiledDeno: true,
    },
    facts: mac,
    expect: "error:sandbox",
    says: [/"darwin"/],
  },
  // --- net scopes: forwarded under bubblewrap with the step, else refused. ---
  {
    request: { runtime: bun, sandbox: "auto", permissions: db },
    facts: both,
    expect: "confined:bwrap,landlock+seccomp:step+net:db.internal:5432",
  },
  {
    // A step without Landlock cannot keep the worker off its forwarder,
    // which runs outside the worker's seccomp filter (red team).
    request: { runtime: deno, sandbox: "auto", permissions: db },
    facts: bwrapSeccompStep,
    expect: "error:net",
    says: [/needs Landlock in the confine step/, /best-effort/],
  },
  {
    request: { runtime: deno, sandbox: "auto", permissions: dbBestEffort },
    facts: bwrapSeccompStep,
    expect: "confined:bwrap+seccomp:step",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: wholeNet },
    facts: both,
    expect: "confined:bwrap,landlock+seccomp:step",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: db },
    facts: landlockAlone,
    expect: "error:net",
    says: [
      /Landlock alone, which holds TCP by port on any host/,
      /best-effort/,
    ],
  },
  {
    request: { runtime: deno, sandbox: "auto", permissions: db },
    facts: landlockAlone,
    expect: "error:net",
    says: [/make bubblewrap usable/],
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: dbBestEffort },
    facts: landlockAlone,
    expect: "confined:landlock+seccomp:step",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: dbBestEffort },
    facts: both,
    expect: "confined:bwrap,landlock+seccomp:step+net:db.internal:5432",
  },
  {
    request: { runtime: bun, sandbox: "auto", permissions: noPort },
    facts: both,
    expect: "error:net",
    says: [/names no port/],
  },
  {
    // bubblewrap without a step (a compiled program): nothing starts the forwarder.
    request: { runtime: bun, sandbox: "auto", permissions: db },
    facts: { ...linux, confineStep: { unavailable: "none", refused: false } },
    expect: "error:net",
    says: [/needs the confine step/],
  },
  // --- which program confines (issue 23 item 3): the native step, an
  // execve, wherever bubblewrap makes it; else the runtime step. ---
  // In the shared pid namespace the native step also sets the worker's
  // parent-death signal (no setpriv between bubblewrap and the step).
  ...[deno, bun, command].map((runtime): Case => ({
    request: { runtime, sandbox: "auto", permissions: readOnly },
    facts: native(both),
    expect: "confined:bwrap,landlock+seccomp:step+native+pdeathsig",
  })),
  {
    // The warm-up start has a pid namespace of its own: setpriv's place.
    request: {
      runtime: bun,
      sandbox: "auto",
      permissions: readOnly,
      sharePids: false,
    },
    facts: native(both),
    expect: "confined:bwrap,landlock+seccomp:step+native",
  },
  {
    // Landlock without signal scoping (ABI 5): no shared namespace either.
    request: { runtime: bun, sandbox: "auto", permissions: readOnly },
    facts: native({ ...linux, confineStep: step(5) }),
    expect: "confined:bwrap,landlock+seccomp:step+native",
  },
  {
    // The runtime step keeps setpriv, shared namespace or not.
    request: { runtime: bun, sandbox: "auto", permissions: readOnly },
    facts: both,
    expect: "confined:bwrap,landlock+seccomp:step",
  },
  {
    // A kernel without Landlock: the native step installs seccomp alone.
    request: { runtime: bun, sandbox: "auto", permissions: nothing },
    facts: native(bwrapSeccompStep),
    expect: "confined:bwrap+seccomp:step+native",
  },
  {
    // Without bubblewrap nothing makes it: the runtime step.
    request: { runtime: bun, sandbox: "auto", permissions: nothing },
    facts: native(landlockAlone),
    expect: "confined:landlock+seccomp:step",
  },
  {
    // Best effort without bubblewrap: the runtime step too.
    request: { runtime: bun, sandbox: "auto", permissions: bestEffort },
    facts: native(neither),
    expect: "confined:landlock+seccomp:step",
  },
  {
    // A forwarded network: the native step hands its listening sockets
    // to the native relay (issue 26), and nothing of it runs beside the
    // worker, so it shares the pid namespace (the step sets pdeathsig).
    request: { runtime: bun, sandbox: "auto", permissions: db },
    facts: native(both),
    expect:
      "confined:bwrap,landlock+seccomp:step+net:db.internal:5432+native+pdeathsig",
  },
  {
    // No step at all (a compiled program): bubblewrap's seccomp, no native step.
    request: { runtime: bun, sandbox: "auto", permissions: nothing },
    facts: native({
      ...linux,
      confineStep: { unavailable: "none", refused: false },
    }),
    expect: "confined:bwrap+seccomp:bwrap",
  },
  {
    // Deno without any sandbox: its flags hold the host, as before.
    request: { runtime: deno, sandbox: "none", permissions: db },
    facts: both,
    expect: "unconfined",
  },
];

const PREFIX = 'Cannot enforce permissions of worker "w.ts": ';

describe("sandboxPlan()", () => {
  test("sandboxPlan() decides every row of the table: runtime, sandbox, permissions and host facts -> the backends, unconfined, or the error", () => {
    for (const { request, facts, expect, says = [], saysNot = [] } of cases) {
      const full: SandboxRequest = {
        module: "w.ts",
        local: true,
        compiledDeno: false,
        ...request,
      };
      const where = JSON.stringify({ request: full, facts });
      let got: string;
      let words: string;
      try {
        const plan = sandboxPlan(full, facts);
        got = plan.confined
          ? `confined:${plan.backends.join(",")}+seccomp:${plan.seccomp}${
            plan.net === undefined
              ? ""
              : `+net:${plan.net.targets.map((t) => t.scope).join(",")}`
          }${plan.step?.program === "native" ? "+native" : ""}${
            plan.parentDeath === "step" ? "+pdeathsig" : ""
          }`
          : "unconfined";
        words = plan.reason;
        if (plan.confined) {
          // What the plan names is what it says it uses.
          assert.equal(plan.bwrap !== undefined, plan.backends[0] === "bwrap");
          assert.equal(plan.seccomp === "step", plan.step !== undefined);
        }
      } catch (error: unknown) {
        assert.ok(error instanceof PermissionError, where);
        assert.equal(error.module, "w.ts");
        got = `error:${error.permission}`;
        assert.ok(error.message.startsWith(PREFIX), error.message);
        words = error.message.slice(PREFIX.length);
      }
      assert.equal(got, expect, where);
      for (const pattern of says) assert.match(words, pattern, where);
      for (const pattern of saysNot) assert.doesNotMatch(words, pattern, where);
    }
  });

  test("sandboxPlan() shares the parent's pid namespace only under bubblewrap with Landlock's signal scoping and no grant into /proc", () => {
    const rows: [
      string,
      ReturnType<typeof resolvePermissions>,
      HostFacts,
      boolean | undefined,
      "own" | "shared" | undefined,
    ][] = [
      ["nothing granted", nothing, both, undefined, "shared"],
      ["a read grant", readOnly, both, undefined, "shared"],
      [
        "ffi and run",
        resolvePermissions({ ffi: true, run: ["git"] }, "/app"),
        both,
        undefined,
        "shared",
      ],
      [
        "a path beside /proc",
        resolvePermissions({ read: ["/procfs"] }, "/"),
        both,
        undefined,
        "shared",
      ],
      [
        "ABI 7",
        readOnly,
        { ...linux, confineStep: step(7) },
        undefined,
        "shared",
      ],
      ["the warm-up start", readOnly, both, false, "own"],
      [
        "ABI 5: no signal scoping",
        readOnly,
        { ...linux, confineStep: step(5) },
        undefined,
        "own",
      ],
      [
        "no Landlock: seccomp step",
        readOnly,
        bwrapSeccompStep,
        undefined,
        "own",
      ],
      [
        "no step: bubblewrap's seccomp",
        readOnly,
        { ...linux, confineStep: step(6, false) },
        undefined,
        "own",
      ],
      [
        "read: true",
        resolvePermissions({ read: true }, "/"),
        both,
        undefined,
        "own",
      ],
      [
        "read of /",
        resolvePermissions({ read: ["/"] }, "/"),
        both,
        undefined,
        "own",
      ],
      [
        "read of /proc",
        resolvePermissions({ read: ["/proc"] }, "/"),
        both,
        undefined,
        "own",
      ],
      [
        "read inside /proc",
        resolvePermissions({ read: ["/proc/1234"] }, "/"),
        both,
        undefined,
        "own",
      ],
      [
        "write inside /proc",
        resolvePermissions({ write: ["/proc/self/fd"] }, "/"),
        both,
        undefined,
        "own",
      ],
      [
        "write: true",
        resolvePermissions({ write: true }, "/"),
        both,
        undefined,
        "own",
      ],
      [
        "Landlock alone: host pids",
        readOnly,
        landlockAlone,
        undefined,
        undefined,
      ],
      [
        "a forwarded network (host:port) through the runtime step",
        resolvePermissions({ net: ["localhost:5432"] }, "/app"),
        both,
        undefined,
        "own",
      ],
      [
        "a forwarded network (host:port) through the native step",
        resolvePermissions({ net: ["localhost:5432"] }, "/app"),
        { ...both, nativeStep: true },
        undefined,
        "shared",
      ],
    ];
    for (const [what, permissions, facts, sharePids, expected] of rows) {
      const plan = sandboxPlan({
        module: "w.ts",
        local: true,
        compiledDeno: false,
        runtime: bun,
        sandbox: "auto",
        permissions,
        ...(sharePids === undefined ? {} : { sharePids }),
      }, facts);
      assert.ok(plan.confined, what);
      assert.equal(plan.pidNamespace, expected, what);
    }
  });

  test("needsHostFacts() asks for no probe where nothing can be confined here", () => {
    const base: SandboxRequest = {
      module: "w.ts",
      runtime: "bun",
      sandbox: "auto",
      permissions: nothing,
      local: true,
      compiledDeno: false,
    };
    assert.equal(needsHostFacts(base), true);
    assert.equal(needsHostFacts({ ...base, sandbox: "none" }), false);
    assert.equal(needsHostFacts({ ...base, permissions: all }), false);
    assert.equal(needsHostFacts({ ...base, local: false }), false);
  });
});
