// How a user runs the Python worker package (workers/python/airlock_worker/)
// when it is vendored: through the launcher airlock_worker.py kept beside it,
// or with `python3 -m airlock_worker`; both confined, outside airlock's tree.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, cpSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { session, WorkerStartError } from "../../mod.ts";
import { type ScratchDir, scratchDir } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needs, needsSandbox } from "../_helpers/tools.ts";
import { rejection } from "../_helpers/wait.ts";
import { findPython, PYTHON_ENTRY } from "./_python.ts";

checkNoLeaks();

const python = findPython();
const skip = needs("python3").skip ?? python.skip;
const interpreter = python.path ?? "python3";
const PACKAGE = join(dirname(PYTHON_ENTRY), "airlock_worker");

interface WhereOps {
  where(): [string, boolean];
}

const WORKER = `import airlock_worker
from airlock_worker import define_worker

def where():
    return [airlock_worker.__file__, isinstance(worker, airlock_worker.Worker)]

worker = define_worker({"where": where})
`;

/**
 * A project without package.json: `vendor/` holds what a user copies from
 * workers/python/ (the launcher, and the package unless `withPackage` is
 * false), `app/worker.py` the worker module.
 */
function vendored(dir: ScratchDir, withPackage = true): void {
  mkdirSync(dir.join("vendor"));
  mkdirSync(dir.join("app"));
  copyFileSync(PYTHON_ENTRY, dir.join("vendor", "airlock_worker.py"));
  if (withPackage) {
    cpSync(PACKAGE, dir.join("vendor", "airlock_worker"), {
      recursive: true,
      filter: (source) => !source.includes("__pycache__"),
    });
  }
  writeFileSync(dir.join("app", "worker.py"), WORKER);
}

function pyTest(
  name: string,
  fn: () => Promise<void>,
): void {
  if (skip === undefined) test(name, fn);
  else test(name, { skip }, () => {});
}

describe("python worker package: vendored and confined", needsSandbox(), () => {
  pyTest(
    "the launcher serves the package beside it; the worker module imports that same package",
    async () => {
      using dir = scratchDir("py-vendored");
      vendored(dir);
      await using s = await session<{ handlers: WhereOps }>(
        dir.join("app", "worker.py"),
        {
          command: [
            interpreter,
            "-B",
            dir.join("vendor", "airlock_worker.py"),
            dir.join("app", "worker.py"),
          ],
          sandbox: "os",
          onStderr: () => {},
        },
      );
      const [file, same] = await s.where();
      assert.equal(file, dir.join("vendor", "airlock_worker", "__init__.py"));
      assert.equal(same, true);
    },
  );

  pyTest(
    "python3 -m airlock_worker serves it with the package on PYTHONPATH and read granted",
    async () => {
      using dir = scratchDir("py-vendored-m");
      vendored(dir);
      await using s = await session<{ handlers: WhereOps }>(
        dir.join("app", "worker.py"),
        {
          command: [
            interpreter,
            "-B",
            "-m",
            "airlock_worker",
            dir.join("app", "worker.py"),
          ],
          env: { PYTHONPATH: dir.join("vendor") },
          permissions: { read: [dir.join("vendor")] },
          sandbox: "os",
          onStderr: () => {},
        },
      );
      const [file, same] = await s.where();
      assert.equal(file, dir.join("vendor", "airlock_worker", "__init__.py"));
      assert.equal(same, true);
    },
  );
});

describe("python worker package: the launcher alone", () => {
  pyTest(
    "fails the start naming the missing package directory",
    async () => {
      using dir = scratchDir("py-launcher-alone");
      vendored(dir, false);
      const failure = await rejection(
        session(dir.join("app", "worker.py"), {
          command: [
            interpreter,
            "-B",
            dir.join("vendor", "airlock_worker.py"),
            dir.join("app", "worker.py"),
          ],
          permissions: "all",
          maxRetries: 0,
          onStderr: () => {},
        }),
        WorkerStartError,
      );
      assert.equal(failure.failure, "exited");
      assert.equal(failure.exitCode, 2);
      assert.match(
        failure.stderrTail,
        /the package .*vendor\/airlock_worker\/ is missing; copy the directory airlock_worker\/ beside airlock_worker\.py/,
      );
    },
  );
});
