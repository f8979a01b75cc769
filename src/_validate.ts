/**
 * The validation kit of every option check in airlock (parent options,
 * permissions, state scopes): one way to show a received value, one path
 * resolver, one check per kind of value. Private to src/.
 *
 * One rule picks the error class:
 * - `TypeError` when the value cannot be this option at all: the wrong type
 *   or shape (a string where a number goes, an object where a list goes), an
 *   unknown key, or a path to nothing (a module or `cwd` that does not
 *   exist);
 * - `RangeError` when the value has the right type but lies outside what is
 *   accepted: a negative or non-finite number, a fraction where a whole
 *   number goes, a string outside a fixed set (`runtime: "node"`), an empty
 *   list where one entry is required.
 *
 * Every message names the option (with its path, e.g. `env.A` or
 * `setup[0]`) and the received value.
 *
 * @module
 */

import {
  fileURLToPath,
  isAbsolute,
  resolve as resolvePath,
} from "./runtime/node_builtins.ts";

/**
 * Shows a received value in an error message: strings quoted, bigints with
 * `n`, containers by kind (never their contents, which may be large or
 * secret).
 *
 * @param value Anything.
 * @returns A short description.
 */
export function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "bigint") return `${value}n`;
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value === "function") return "a function";
  if (value instanceof URL) return value.href;
  if (typeof value === "object") return "an object";
  return String(value);
}

/**
 * The message of an invalid option.
 *
 * @param name The option's name.
 * @param expected What is accepted.
 * @param value What was received.
 * @returns The message.
 */
export function invalid(
  name: string,
  expected: string,
  value: unknown,
): string {
  return `Invalid option "${name}": expected ${expected}, received ${
    describe(value)
  }`;
}

/**
 * Checks a millisecond option: a finite number ≥ 0 (or > 0).
 *
 * @param name The option's name.
 * @param value Its value.
 * @param fallback The default, used when `value` is `undefined`.
 * @param allowZero Whether 0 is accepted.
 * @returns The value.
 * @throws {TypeError} when it is not a number.
 * @throws {RangeError} when it is negative, not finite, or 0 where 0 is refused.
 */
export function milliseconds(
  name: string,
  value: unknown,
  fallback: number,
  allowZero = true,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number") {
    throw new TypeError(invalid(name, "a number of milliseconds", value));
  }
  if (!Number.isFinite(value) || value < 0 || (!allowZero && value === 0)) {
    throw new RangeError(
      invalid(name, `a finite number ${allowZero ? "≥ 0" : "> 0"}`, value),
    );
  }
  return value;
}

/**
 * Checks a whole-number option.
 *
 * @param name The option's name.
 * @param value Its value.
 * @param fallback The default, used when `value` is `undefined`.
 * @param min The smallest accepted value.
 * @returns The value.
 * @throws {TypeError} when it is not a number.
 * @throws {RangeError} when it is not a safe integer ≥ `min`.
 */
export function wholeNumber(
  name: string,
  value: unknown,
  fallback: number,
  min: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number") {
    throw new TypeError(invalid(name, "a whole number", value));
  }
  if (!Number.isSafeInteger(value) || value < min) {
    throw new RangeError(invalid(name, `a whole number ≥ ${min}`, value));
  }
  return value;
}

/**
 * Checks a list of strings.
 *
 * @param name The option's name.
 * @param value Its value (`undefined` is an empty list).
 * @returns A copy of the list.
 * @throws {TypeError} when it is not an array of strings.
 */
export function stringList(name: string, value: unknown): string[] {
  if (value === undefined) return [];
  if (!Array.isArray(value)) {
    throw new TypeError(invalid(name, "a list of strings", value));
  }
  value.forEach((item: unknown, index) => {
    if (typeof item !== "string") {
      throw new TypeError(invalid(`${name}[${index}]`, "a string", item));
    }
  });
  return [...value];
}

/**
 * Checks a string option against a fixed set.
 *
 * @typeParam T The accepted strings.
 * @param name The option's name.
 * @param value Its value.
 * @param allowed The accepted strings.
 * @param fallback The default, used when `value` is `undefined`.
 * @returns The value.
 * @throws {TypeError} when it is not a string.
 * @throws {RangeError} when it is a string outside the set.
 */
export function oneOf<T extends string>(
  name: string,
  value: unknown,
  allowed: readonly T[],
  fallback: T,
): T {
  if (value === undefined) return fallback;
  if (
    typeof value === "string" && (allowed as readonly string[]).includes(value)
  ) {
    return value as T;
  }
  const expected = allowed.length > 1
    ? `${allowed.slice(0, -1).map((a) => `"${a}"`).join(", ")} or "${
      allowed[allowed.length - 1]
    }"`
    : `"${allowed[0]}"`;
  const message = invalid(name, expected, value);
  throw typeof value === "string"
    ? new RangeError(message)
    : new TypeError(message);
}

/**
 * Turns a path option (a path string, a `file:` URL string or a `URL`) into
 * an absolute path. The one path resolver of airlock's options.
 *
 * @param name The option's name.
 * @param value Its value.
 * @param cwd What a relative path resolves against (absolute).
 * @returns The absolute path.
 * @throws {TypeError} when it is not a non-empty string or a `file:` URL.
 */
export function toPath(name: string, value: unknown, cwd: string): string {
  if (value instanceof URL) {
    if (value.protocol !== "file:") {
      throw new TypeError(invalid(name, "a file URL or path", value));
    }
    return fileURLToPath(value);
  }
  if (typeof value !== "string" || value === "") {
    throw new TypeError(invalid(name, "a path or file URL", value));
  }
  if (value.startsWith("file:")) {
    let path: string;
    try {
      path = fileURLToPath(value);
    } catch (error: unknown) {
      throw new TypeError(invalid(name, "a path or file URL", value), {
        cause: error,
      });
    }
    return path;
  }
  return isAbsolute(value) ? value : resolvePath(cwd, value);
}

/**
 * Refuses keys an options object does not know: a typo such as
 * `callTimeOutMs`, or a pool option given to a session, would otherwise be
 * ignored without a word.
 *
 * @param options The caller's options.
 * @param known The keys of the options type.
 * @param what What takes the options, for the message (e.g. "this mode").
 * @throws {TypeError} naming the key, a near spelling and the known keys.
 */
export function checkKnownKeys(
  options: object,
  known: readonly string[],
  what = "this mode",
): void {
  for (const key of Object.keys(options)) {
    if (known.includes(key)) continue;
    const near = known.find((name) => name.toLowerCase() === key.toLowerCase());
    throw new TypeError(
      `Invalid option "${key}": ${what} has no such option${
        near ? ` (did you mean "${near}"?)` : ""
      }; known options: ${known.join(", ")}`,
    );
  }
}
