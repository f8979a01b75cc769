// deno-lint-ignore-file no-console
// The conformance worker in TypeScript: the same ops, with the same
// behaviour, as tests/fixtures/python/conformance_worker.py. Not a test file.
import process from "node:process";
import { defineWorker } from "../../worker.ts";
import { PROCESS_ID } from "../fixtures/_process_id.ts";
import { sleep } from "../fixtures/_sleep.ts";

class CustomError extends Error {
  code: string;
  detail: { table: string };
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "CustomError";
    this.code = "E_CUSTOM";
    this.detail = { table: "t1" };
  }
}

function abortError(): Error {
  const error = new Error("The call was cancelled by the parent");
  error.name = "AbortError";
  return error;
}

let counter = 0;
const streams = new Map<string, { produced: number; finished: boolean }>();
const seenCancels: string[] = [];
const meetings = new Map<
  string,
  { count: number; waiters: (() => void)[] }
>();

export default defineWorker({
  echo(value: unknown) {
    return value;
  },
  add(a: number, b: number) {
    return a + b;
  },
  whoami() {
    return PROCESS_ID;
  },
  /** Returns `value` after `ms`; fails with AbortError when cancelled. */
  async delay(ms: number, value: unknown) {
    await sleep(ms, this.signal, abortError);
    return value;
  },
  /** Never settles and ignores cancellation. */
  hang() {
    return new Promise(() => {});
  },
  /** Resolves once `n` calls with this key are running at the same time. */
  async rendezvous(key: string, n: number, timeoutMs: number) {
    const meeting = meetings.get(key) ?? { count: 0, waiters: [] };
    meetings.set(key, meeting);
    meeting.count++;
    if (meeting.count >= n) {
      for (const wake of meeting.waiters.splice(0)) wake();
      return meeting.count;
    }
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`only ${meeting.count} of ${n} calls arrived`)),
        timeoutMs,
      );
      meeting.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    return meeting.count;
  },
  /** Logs `waiting <token>`, waits for the cancel, records `token`, fails. */
  async waitForCancel(token: string) {
    console.error(`waiting ${token}`);
    await sleep(60_000, this.signal).catch(() => {});
    if (this.signal.aborted) seenCancels.push(token);
    throw abortError();
  },
  /** The tokens of the waitForCancel calls that saw their cancel. */
  cancelled() {
    return seenCancels;
  },
  crash() {
    process.kill(process.pid, "SIGKILL");
    return new Promise(() => {});
  },
  exitWith(code: number) {
    process.exit(code);
  },
  throwCustom() {
    throw new CustomError("custom failure", {
      cause: new TypeError("root cause"),
    });
  },
  returnUnsendable() {
    return { ok: true, fn: () => 1 };
  },
  /** Prints with the language's ordinary print (stdout). */
  print(text: string) {
    console.log(text);
    return "printed";
  },
  stderr(text: string) {
    console.error(text);
    return "written";
  },
  bytes(size: number) {
    const data = new Uint8Array(size);
    for (let i = 0; i < size; i++) data[i] = (i * 7) & 0xff;
    return data;
  },
  increment() {
    return ++counter;
  },
  env(name: string) {
    return process.env[name] ?? null;
  },
  cwd() {
    return process.cwd();
  },
  /** Streams 0 .. n-1 (an async generator). */
  async *count(n: number) {
    for (let i = 0; i < n; i++) yield i;
  },
  /** Streams 0 .. n-1 (a plain generator). */
  *countSync(n: number) {
    for (let i = 0; i < n; i++) yield i;
  },
  /** Streams 0, 1, 2 … forever; counts what it produced, marks its finally. */
  async *endless(token: string) {
    const state = { produced: 0, finished: false };
    streams.set(token, state);
    try {
      while (true) {
        await Promise.resolve();
        yield state.produced++;
      }
    } finally {
      state.finished = true;
    }
  },
  /** What `endless(token)` produced and whether its finally ran. */
  streamState(token: string) {
    return streams.get(token) ?? null;
  },
  /** Streams 0 .. n-1, then throws a CustomError "stream failure". */
  async *failAfter(n: number) {
    for (let i = 0; i < n; i++) yield i;
    throw new CustomError("stream failure");
  },
  /** Reports progress 1 .. steps at once, then returns "reported". */
  report(steps: number) {
    for (let i = 1; i <= steps; i++) this.progress(i);
    return "reported";
  },
}, { idempotent: ["echo", "add"] });
