// bwrapArgv() and bwrapProbeArgv() (src/runtime/sandbox/bwrap.ts): the
// bubblewrap command line, built without running it, and the environment
// bubblewrap starts with (bwrap_environment.ts). The same argv confining
// real workers: sandbox_bwrap_workers_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BIND_FD_PLACEHOLDER,
  bwrapArgv,
  bwrapProbeArgv,
  LIBRARY_PATHS,
  NETWORK_PATHS,
  PROGRAM_PATHS,
} from "../../src/runtime/sandbox/bwrap.ts";
import { bwrapEnvironment } from "../../src/runtime/sandbox/bwrap_environment.ts";
import { BASE } from "./_bwrap.ts";

const ARITY: Record<string, number> = {
  "--ro-bind-try": 2,
  "--bind-try": 2,
  "--ro-bind-fd": 2,
  "--bind-fd": 2,
  "--setenv": 2,
  "--dev": 1,
  "--proc": 1,
  "--tmpfs": 1,
  "--dir": 1,
  "--chdir": 1,
  "--remount-ro": 1,
  "--cap-drop": 1,
};

interface Parsed {
  flags: string[];
  ops: { op: string; args: string[] }[];
  command: string[];
}

/** Splits a bwrap argv into bare flags, operations with arguments, and the command. */
function parse(argv: readonly string[]): Parsed {
  const parsed: Parsed = { flags: [], ops: [], command: [] };
  let index = 1;
  while (index < argv.length) {
    const arg = argv[index] ?? "";
    if (arg === "--") {
      parsed.command = argv.slice(index + 1);
      break;
    }
    const arity = ARITY[arg];
    if (arity === undefined) {
      parsed.flags.push(arg);
      index += 1;
    } else {
      parsed.ops.push({
        op: arg,
        args: argv.slice(index + 1, index + 1 + arity),
      });
      index += 1 + arity;
    }
  }
  return parsed;
}

/** The destinations of the mount operations, in order, as "op dest". */
function mounts(argv: readonly string[]): string[] {
  return parse(argv).ops
    .filter(({ op }) => !["--setenv", "--chdir", "--cap-drop"].includes(op))
    .map(({ op, args }) => `${op} ${args.at(-1)}`);
}

describe("bwrapArgv() namespaces and process", () => {
  test("bwrapArgv() starts with bwrap and isolates every namespace, pid included", () => {
    const argv = bwrapArgv(BASE);
    assert.equal(argv[0], "/usr/bin/bwrap");
    const { flags, ops } = parse(argv);
    for (
      const flag of [
        "--die-with-parent",
        "--new-session",
        "--unshare-user",
        "--disable-userns",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--unshare-net",
      ]
    ) {
      assert.ok(flags.includes(flag), flag);
    }
    assert.ok(!flags.includes("--unshare-all"));
    assert.deepEqual(ops.find(({ op }) => op === "--cap-drop")?.args, ["ALL"]);
  });

  test("bwrapArgv() runs the command after --", () => {
    const { command } = parse(bwrapArgv(BASE));
    assert.deepEqual(command, BASE.command);
  });

  test("bwrapArgv() shares the network and mounts resolver and CA files when net is granted", () => {
    const argv = bwrapArgv({ ...BASE, net: true });
    assert.ok(!argv.includes("--unshare-net"));
    const dests = mounts(argv);
    for (const path of NETWORK_PATHS) {
      assert.ok(dests.includes(`--ro-bind-try ${path}`), path);
    }
    assert.ok(
      !mounts(bwrapArgv(BASE)).includes("--ro-bind-try /etc/resolv.conf"),
    );
  });

  test("bwrapArgv() puts only the variables that act at start on its command line; bwrapEnvironment() gives bubblewrap the rest", () => {
    const env = {
      A: "1",
      B: "two words",
      C: "",
      LD_PRELOAD: "/lib/x.so",
      GCONV_PATH: "/g",
      ENV: "/e.sh",
      "BASH_FUNC_exec%%": "() { :; }",
    };
    const argv = bwrapArgv({ ...BASE, env });
    const { ops } = parse(argv);
    assert.deepEqual(
      ops.filter(({ op }) => op === "--setenv").map(({ args }) => args),
      [
        ["LD_PRELOAD", "/lib/x.so"],
        ["GCONV_PATH", "/g"],
        ["ENV", "/e.sh"],
        ["BASH_FUNC_exec%%", "() { :; }"],
      ],
    );
    // bubblewrap passes its own environment on: clearing it would lose it.
    assert.ok(!argv.includes("--clearenv"));
    assert.ok(!argv.includes("two words"));
    assert.deepEqual(bwrapEnvironment(env), { A: "1", B: "two words", C: "" });
  });

  test("bwrapArgv() rejects variable names bwrap cannot set", () => {
    assert.throws(
      () => bwrapArgv({ ...BASE, env: { "A=B": "1" } }),
      RangeError,
    );
    assert.throws(() => bwrapArgv({ ...BASE, env: { "": "1" } }), RangeError);
  });

  test("bwrapArgv() rejects relative paths", () => {
    assert.throws(() => bwrapArgv({ ...BASE, read: ["data"] }), RangeError);
    assert.throws(
      () => bwrapArgv({ ...BASE, readOnly: ["./app"] }),
      RangeError,
    );
    assert.throws(() => bwrapArgv({ ...BASE, cwd: "app" }), RangeError);
  });
});

describe("bwrapArgv() file system", () => {
  test("bwrapArgv() mounts libraries, the runtime and readOnly read-only, then remounts / read-only", () => {
    const argv = bwrapArgv({
      ...BASE,
      readOnly: ["/app", "/app/node_modules"],
    });
    const dests = mounts(argv);
    for (const path of LIBRARY_PATHS) {
      assert.ok(dests.includes(`--ro-bind-try ${path}`), path);
    }
    assert.ok(dests.includes("--ro-bind-try /opt/deno/deno"));
    assert.ok(dests.includes("--ro-bind-try /app"));
    assert.ok(
      !dests.includes("--ro-bind-try /app/node_modules"),
      "covered by /app",
    );
    assert.ok(!dests.some((dest) => dest.startsWith("--bind-try")));
    assert.equal(dests.at(-1), "--remount-ro /");
    for (const path of PROGRAM_PATHS) {
      assert.ok(!dests.includes(`--ro-bind-try ${path}`), path);
    }
  });

  test("bwrapArgv() gives a private /tmp, /dev and /proc", () => {
    const dests = mounts(bwrapArgv(BASE));
    assert.ok(dests.includes("--tmpfs /tmp"));
    assert.ok(dests.includes("--dev /dev"));
    assert.ok(dests.includes("--proc /proc"));
  });

  test("bwrapArgv() binds read grants read-only and write grants read-write", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, read: ["/data/ref"], write: ["/data/out"] }),
    );
    assert.ok(dests.includes("--ro-bind-try /data/ref"));
    assert.ok(dests.includes("--bind-try /data/out"));
  });

  test("bwrapArgv() lets a write grant win over read-only mounts of the same or inner paths", () => {
    const dests = mounts(
      bwrapArgv({
        ...BASE,
        readOnly: ["/proj/workers"],
        read: ["/proj", "/data/A/sub"],
        write: ["/proj", "/data/A"],
      }),
    );
    assert.ok(dests.includes("--bind-try /proj"));
    assert.ok(!dests.includes("--ro-bind-try /proj"));
    assert.ok(!dests.includes("--ro-bind-try /proj/workers"));
    assert.ok(dests.includes("--bind-try /data/A"));
    assert.ok(!dests.includes("--ro-bind-try /data/A/sub"));
  });

  test("bwrapArgv() mounts an inner write grant after its read-only parent", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, read: ["/data"], write: ["/data/out"] }),
    );
    const parent = dests.indexOf("--ro-bind-try /data");
    const inner = dests.indexOf("--bind-try /data/out");
    assert.ok(parent >= 0 && inner > parent);
  });

  test("bwrapArgv() mounts paths under /tmp after the private /tmp", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, readOnly: ["/tmp/app"], write: ["/tmp/data/A"] }),
    );
    const tmp = dests.indexOf("--tmpfs /tmp");
    assert.ok(tmp >= 0);
    assert.ok(dests.indexOf("--ro-bind-try /tmp/app") > tmp);
    assert.ok(dests.indexOf("--bind-try /tmp/data/A") > tmp);
  });

  test("bwrapArgv() read: true binds / read-only first and keeps the host's /tmp", () => {
    const dests = mounts(bwrapArgv({ ...BASE, read: true }));
    assert.equal(dests[0], "--ro-bind-try /");
    assert.ok(!dests.includes("--tmpfs /tmp"));
    assert.ok(dests.includes("--dev /dev"));
    assert.equal(dests.at(-1), "--remount-ro /");
  });

  test("bwrapArgv() write: true binds / read-write and does not remount it read-only", () => {
    const dests = mounts(bwrapArgv({ ...BASE, write: true, read: ["/x"] }));
    assert.equal(dests[0], "--bind-try /");
    assert.ok(!dests.some((dest) => dest.startsWith("--ro-bind-try")));
    assert.ok(!dests.includes("--remount-ro /"));
  });

  test("bwrapArgv() mounts the granted programs' files and absolute run paths, the program directories only for run: true", () => {
    // Names are resolved by the parent into `programs` (issue 24, item 4):
    // no program directory for them.
    const named = mounts(
      bwrapArgv({
        ...BASE,
        run: ["git", "/opt/tool/bin/x"],
        programs: ["/usr/bin/git"],
      }),
    );
    for (const path of PROGRAM_PATHS) {
      assert.ok(!named.includes(`--ro-bind-try ${path}`), path);
    }
    assert.ok(named.includes("--ro-bind-try /usr/bin/git"));
    assert.ok(named.includes("--ro-bind-try /opt/tool/bin/x"));
    assert.ok(named.includes("--ro-bind-try /usr/lib"));
    const all = mounts(bwrapArgv({ ...BASE, run: true }));
    assert.ok(all.includes("--ro-bind-try /usr"));
    assert.ok(!all.includes("--ro-bind-try /usr/lib"), "covered by /usr");
  });

  test("bwrapArgv() binds a grant from its real path, and a raceable one from a descriptor", () => {
    const argv = bwrapArgv({
      ...BASE,
      read: ["/srv/link", "/srv/pub"],
      write: ["/srv/out"],
      grants: {
        sources: new Map([
          ["/srv/link", "/data/real"],
          ["/srv/pub", "/srv/pub"],
          ["/srv/out", "/srv/out"],
        ]),
        throughFd: new Set(["/srv/pub", "/srv/out"]),
      },
    });
    const ops = parse(argv).ops.map(({ op, args }) => [op, ...args].join(" "));
    assert.ok(
      ops.includes("--ro-bind-try /data/real /srv/link"),
      ops.join("\n"),
    );
    assert.ok(
      ops.includes(`--ro-bind-fd ${BIND_FD_PLACEHOLDER}/srv/pub /srv/pub`),
    );
    assert.ok(
      ops.includes(`--bind-fd ${BIND_FD_PLACEHOLDER}/srv/out /srv/out`),
    );
  });

  test("bwrapArgv() mounts granted ffi libraries read-only", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, ffi: ["/opt/native/libfoo.so"] }),
    );
    assert.ok(dests.includes("--ro-bind-try /opt/native/libfoo.so"));
  });

  test("bwrapArgv() changes to a mounted cwd without making it", () => {
    const argv = bwrapArgv({ ...BASE, readOnly: ["/app"], cwd: "/app/sub" });
    assert.ok(!mounts(argv).includes("--dir /app/sub"));
    assert.deepEqual(
      parse(argv).ops.find(({ op }) => op === "--chdir")?.args,
      ["/app/sub"],
    );
  });

  test("bwrapArgv() makes an empty directory for a cwd no mount covers", () => {
    const argv = bwrapArgv({
      ...BASE,
      readOnly: ["/proj/workers"],
      cwd: "/proj",
    });
    const dests = mounts(argv);
    assert.ok(dests.includes("--dir /proj"));
    assert.ok(
      dests.indexOf("--dir /proj") <
        dests.indexOf("--ro-bind-try /proj/workers"),
    );
    assert.ok(dests.indexOf("--dir /proj") < dests.indexOf("--remount-ro /"));
    assert.deepEqual(
      parse(argv).ops.find(({ op }) => op === "--chdir")?.args,
      ["/proj"],
    );
    assert.ok(
      !mounts(bwrapArgv({ ...BASE, cwd: "/" })).some((d) =>
        d.startsWith("--dir")
      ),
    );
  });

  test("bwrapArgv() normalises paths and drops duplicates", () => {
    const dests = mounts(
      bwrapArgv({ ...BASE, readOnly: ["/app/", "/app//", "/app/x/.."] }),
    );
    assert.equal(
      dests.filter((dest) => dest === "--ro-bind-try /app").length,
      1,
    );
  });
});

describe("bwrapProbeArgv()", () => {
  test("bwrapProbeArgv() runs the runtime's --version in an empty sandbox", () => {
    const argv = bwrapProbeArgv("/usr/bin/bwrap", "/opt/bun/bun");
    assert.deepEqual(parse(argv).command, ["/opt/bun/bun", "--version"]);
    assert.ok(argv.includes("--unshare-user"));
  });
});
