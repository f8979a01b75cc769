import { describe, test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { detect } from "../../src/runtime/detect.ts";
import type { ChildHandle } from "../../src/runtime/types.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { within } from "../_helpers/wait.ts";

checkNoLeaks();

const adapter = detect();
const env = { PATH: "/usr/bin:/bin" };

/** Reads a stream to its end. */
async function readAll(stream: ReadableStream<Uint8Array>): Promise<string> {
  const decoder = new TextDecoder();
  let text = "";
  for await (const chunk of stream) {
    text += decoder.decode(chunk, { stream: true });
  }
  return text + decoder.decode();
}

function spawnCat(): ChildHandle {
  return adapter.spawn({ argv: ["cat"], env, cwd: "/" });
}

describe("RuntimeAdapter.spawn()", () => {
  test("spawn() of a program that does not exist throws at once, naming the cause", () => {
    assert.throws(
      () =>
        adapter.spawn({
          argv: ["/nonexistent/airlock-no-such-program"],
          env,
          cwd: "/",
        }),
      (error: unknown) => {
        assert.ok(error instanceof Error);
        assert.equal((error as { code?: unknown }).code, "ENOENT");
        return true;
      },
    );
  });

  test("spawn() pipes stdin to the child and its stdout back, in order", async () => {
    const child = spawnCat();
    try {
      const out = readAll(child.stdout);
      const err = readAll(child.stderr);
      const big = new Uint8Array(3 * 1024 * 1024).fill(120);
      await child.write([new TextEncoder().encode("a"), big]);
      await child.write([new TextEncoder().encode("b")]);
      child.closeStdin();
      const text = await within(out, 30_000, "cat's stdout");
      assert.equal(text.length, big.byteLength + 2);
      assert.equal(text[0], "a");
      assert.equal(text.at(-1), "b");
      assert.equal(await err, "");
      assert.deepEqual(await child.exited, { code: 0, signal: null });
    } finally {
      child.kill("SIGKILL");
      await child.exited;
    }
  });

  test("spawn() output written while the child is unreferenced is read once referenced, and to the end after exit", async () => {
    const child = spawnCat();
    try {
      const reader = child.stdout.getReader();
      const decoder = new TextDecoder();
      const first = reader.read();
      child.setRef(false);
      // (The deadlines' timers keep this test's event loop alive meanwhile.)
      await within(
        child.write([new TextEncoder().encode("idle")]),
        30_000,
        "write",
      );
      child.setRef(true);
      let text = "";
      const chunk = await within(first, 30_000, "output written while idle");
      text += decoder.decode(chunk.value);
      while (text.length < 4) {
        text += decoder.decode((await reader.read()).value);
      }
      assert.equal(text, "idle");
      // Unreferenced again: what the child writes before exiting is still
      // read to its end once it has exited.
      child.setRef(false);
      await within(
        child.write([new TextEncoder().encode("last")]),
        30_000,
        "write",
      );
      child.closeStdin();
      let rest = "";
      while (true) {
        const { value, done } = await within(reader.read(), 30_000, "rest");
        if (done) break;
        rest += decoder.decode(value);
      }
      assert.equal(rest, "last");
      assert.equal(await within(reader.closed, 30_000, "closed"), undefined);
      child.stderr.cancel().catch(() => {});
      assert.deepEqual(await within(child.exited, 30_000, "exit"), {
        code: 0,
        signal: null,
      });
    } finally {
      child.kill("SIGKILL");
      child.setRef(true);
      await child.exited;
    }
  });

  test("spawn() exit status names the signal that ended the child", async () => {
    const child = spawnCat();
    child.stdout.cancel().catch(() => {});
    child.stderr.cancel().catch(() => {});
    child.kill("SIGKILL");
    assert.deepEqual(await within(child.exited, 30_000, "exit"), {
      code: null,
      signal: "SIGKILL",
    });
  });

  test("spawn() write() to a child that is gone rejects", async () => {
    const child = spawnCat();
    child.stdout.cancel().catch(() => {});
    child.stderr.cancel().catch(() => {});
    child.kill("SIGKILL");
    await child.exited;
    const chunk = new Uint8Array(256 * 1024);
    const failure = await within(
      (async () => {
        // The first writes may still land in the pipe's buffer.
        for (let i = 0; i < 64; i++) await child.write([chunk]);
      })().then(() => undefined, (error: unknown) => error),
      30_000,
      "writes to a dead child",
    );
    assert.ok(failure instanceof Error, `writes settled with ${failure}`);
  });
});

describe("RuntimeAdapter.spawn() with extraInput", () => {
  test("spawn() with extraInput: the child reads the bytes on descriptor 3, then end of file", async () => {
    const bytes = new Uint8Array(20_000).map((_, i) => i % 251);
    const child = adapter.spawn({
      argv: ["/bin/sh", "-c", "cksum <&3; cat"],
      env,
      cwd: "/",
      extraInput: bytes,
    });
    await child.write([new TextEncoder().encode("after\n")]);
    child.closeStdin();
    const [out] = await Promise.all([readAll(child.stdout), child.exited]);
    const expected = await (async () => {
      const cksum = adapter.spawn({ argv: ["cksum"], env, cwd: "/" });
      await cksum.write([bytes]);
      cksum.closeStdin();
      return await readAll(cksum.stdout);
    })();
    assert.equal(out, `${expected}after\n`);
  });

  test("spawn() with extraInput passes arguments equal to the runtime's own binary unchanged", async () => {
    // Deno's node:child_process rewrites such arguments ("run -A ...").
    const args = [process.execPath, "run", "x", process.execPath, "--version"];
    const child = adapter.spawn({
      argv: ["/bin/sh", "-c", 'printf "%s\\n" "$@"', "sh", ...args],
      env,
      cwd: "/",
      extraInput: new Uint8Array(1),
    });
    child.closeStdin();
    const [out] = await Promise.all([readAll(child.stdout), child.exited]);
    assert.equal(out, args.map((arg) => `${arg}\n`).join(""));
  });

  test("spawn() with extraInput of a program that does not exist throws at once", () => {
    assert.throws(
      () =>
        adapter.spawn({
          argv: ["/nonexistent/airlock-no-such-program"],
          env,
          cwd: "/",
          extraInput: new Uint8Array(1),
        }),
      (error: unknown) => (error as { code?: unknown }).code === "ENOENT",
    );
  });

  test("spawn() with bytes on descriptor 3, out of descriptors, throws EMFILE and the parent lives on", () => {
    // The fixture fills its own descriptors, then spawns. Deno's
    // node:child_process reported the failure a tick later as an "error"
    // event nothing heard, which ended the parent.
    const script = fileURLToPath(
      new URL("../fixtures/spawn_emfile.ts", import.meta.url),
    );
    const bun = typeof (globalThis as { Bun?: unknown }).Bun === "object";
    const run = spawnSync(
      process.execPath,
      bun ? [script] : ["run", "-A", "--quiet", script],
      {
        encoding: "utf8",
        timeout: 60_000,
        env: { ...process.env, NO_COLOR: "1" },
      },
    );
    assert.equal(run.status, 0, run.stderr);
    assert.deepEqual(JSON.parse(run.stdout.trim()), { code: "EMFILE" });
  });
});
