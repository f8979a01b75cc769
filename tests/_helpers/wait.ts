/**
 * Waiting in tests: for a promise under a deadline, for a condition, for a
 * rejection of a given class.
 *
 * @module
 */

import assert from "node:assert/strict";
import { inspect } from "node:util";
import "./deno_dir.ts";

/**
 * Rejects if `promise` has not settled within `ms`.
 *
 * @param promise What to wait for.
 * @param ms The deadline.
 * @param what What it is, for the failure message.
 * @returns The promise's value.
 */
export function within<T>(
  promise: Promise<T>,
  ms: number,
  what: string,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new Error(`Deadline: ${what} did not settle within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Waits until `check` returns true, polling, under a deadline.
 *
 * @param check The condition.
 * @param ms The deadline.
 * @param what What is awaited, for the failure message.
 */
export async function until(
  check: () => boolean | Promise<boolean>,
  ms: number,
  what: string,
): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`Deadline: ${what} within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

// deno-lint-ignore no-explicit-any
type ErrorClass<E extends Error> = abstract new (...args: any[]) => E;

/**
 * Awaits a promise that must reject with an instance of `errorClass`, and
 * returns that error so the test can assert its fields.
 *
 * @param promise The promise, or a function returning one (a synchronous
 * throw of the function counts as a rejection).
 * @param errorClass The class the error must be an instance of.
 * @returns The error.
 * @throws {assert.AssertionError} when the promise resolves, or rejects with
 * something else (the actual error is the assertion's `actual` and `cause`).
 *
 * @example
 * ```ts ignore
 * const error = await rejection(s.call("boom", []), RemoteError);
 * assert.equal(error.remoteName, "TypeError");
 * ```
 */
export async function rejection<E extends Error>(
  promise: Promise<unknown> | (() => unknown),
  errorClass: ErrorClass<E>,
): Promise<E> {
  let value: unknown;
  try {
    value = await (typeof promise === "function" ? promise() : promise);
  } catch (error: unknown) {
    if (error instanceof errorClass) return error;
    const failure = new assert.AssertionError({
      message: `Expected a rejection with ${errorClass.name}, got ${
        inspect(error, { depth: 2 })
      }`,
      actual: error,
      expected: errorClass,
      operator: "instanceof",
    });
    failure.cause = error;
    throw failure;
  }
  throw new assert.AssertionError({
    message:
      `Expected a rejection with ${errorClass.name}, but it resolved with ${
        inspect(value, { depth: 2 })
      }`,
    actual: value,
    expected: errorClass,
    operator: "rejects",
  });
}
