/**
 * Turning what a worker sent as an error into a `RemoteError`. The value is
 * the worker's, so nothing here trusts it: every read of it may throw (a
 * getter, a proxy) and every field may have any type. The rebuild is total:
 * it returns a `RemoteError` for any value, in time proportional to the
 * value. Private to src/parent.
 *
 * @module
 */

import { RemoteError } from "../errors.ts";
import { accessHint, type HintContext } from "./_hints.ts";

/** Characters of a non-error value quoted in a message. */
const DESCRIBE_CHARS = 200;

/** Where the error was thrown. */
export interface RemoteErrorSite {
  /** The worker module (or command). */
  module: string;
  /** The op whose handler threw. */
  op: string;
  /** The worker's pid. */
  pid: number;
}

/**
 * Rebuilds a `RemoteError` from what a worker sent as an error. Never
 * throws: a value that cannot be read becomes a `RemoteError` saying so.
 *
 * @param value The decoded error value.
 * @param where The module, op and pid.
 * @param grants The worker's grants, to hint at the one a denied access needs.
 * @returns The remote error.
 */
export function toRemoteError(
  value: unknown,
  where: RemoteErrorSite,
  grants?: HintContext,
): RemoteError {
  try {
    return isError(value) ? fromError(value, where, grants) : new RemoteError({
      ...where,
      remoteName: "Error",
      remoteMessage: typeof value === "string"
        ? value
        : `the handler threw a non-error value: ${describeValue(value)}`,
      properties: { value },
    });
  } catch (error: unknown) {
    return new RemoteError({
      ...where,
      remoteName: "Error",
      remoteMessage: `the handler threw a value that cannot be read: ${
        describeValue(error)
      }`,
      properties: {},
    });
  }
}

function isError(value: unknown): value is Error {
  try {
    return value instanceof Error;
  } catch {
    // A proxy whose getPrototypeOf trap throws.
    return false;
  }
}

function fromError(
  value: Error,
  where: RemoteErrorSite,
  grants: HintContext | undefined,
): RemoteError {
  const name = read(value, "name");
  const message = read(value, "message");
  const stack = read(value, "stack");
  const properties: Record<string, unknown> = {};
  for (const key of Object.keys(value)) {
    if (key === "name" || key === "message" || key === "stack") continue;
    if (key === "cause") continue;
    // defineProperty: a key "__proto__" stays a key.
    Object.defineProperty(properties, key, {
      value: read(value, key),
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  let cause: { cause: unknown } | undefined;
  try {
    if (Object.hasOwn(value, "cause")) cause = { cause: read(value, "cause") };
  } catch {
    // A proxy whose getOwnPropertyDescriptor trap throws: no cause.
  }
  return new RemoteError({
    ...where,
    remoteName: typeof name === "string" && name !== "" ? name : "Error",
    remoteMessage: typeof message === "string"
      ? message
      : describeValue(message),
    remoteStack: typeof stack === "string" ? stack : undefined,
    properties,
    ...cause,
    hint: grants && accessHint(value, grants),
  });
}

/** Reads a property; a getter that throws reads as `undefined`. */
function read(value: object, key: string): unknown {
  try {
    return (value as Record<string, unknown>)[key];
  } catch {
    return undefined;
  }
}

/**
 * Describes any value in a few words for a message without calling its
 * `toString` or `valueOf`: a primitive as itself, an error by name and
 * message, an object by its class and first keys. Never throws (a getter
 * or proxy trap that throws is caught).
 *
 * @param value The value.
 * @returns At most about 200 characters.
 */
export function describeValue(value: unknown): string {
  try {
    return clip(describeUnsafe(value));
  } catch {
    return "a value that cannot be read";
  }
}

function describeUnsafe(value: unknown): string {
  switch (typeof value) {
    case "string":
      return JSON.stringify(clip(value));
    case "number":
    case "boolean":
    case "undefined":
    case "bigint":
      return String(value);
    case "symbol":
      return value.toString();
    case "function":
      return "a function";
  }
  if (value === null || typeof value !== "object") return String(value);
  if (Array.isArray(value)) return `an array of ${value.length} items`;
  if (isError(value)) {
    const name = read(value, "name");
    const message = read(value, "message");
    return `${typeof name === "string" ? clip(name, 40) : "Error"}: ${
      typeof message === "string" ? clip(message) : "(no message)"
    }`;
  }
  const own = Object.getOwnPropertyDescriptor;
  const proto = Object.getPrototypeOf(value);
  const ctor = proto === null ? undefined : own(proto, "constructor")?.value;
  const className = typeof ctor === "function"
    ? own(ctor, "name")?.value
    : undefined;
  const keys = Object.keys(value);
  const shown = keys.slice(0, 5).map((key) => JSON.stringify(clip(key, 40)));
  const more = keys.length > 5 ? `, … (${keys.length} keys)` : "";
  return `${
    proto === null
      ? "an object without prototype"
      : typeof className === "string" && className !== "" &&
          className !== "Object"
      ? `an instance of ${className}`
      : "an object"
  }${keys.length > 0 ? ` with keys ${shown.join(", ")}${more}` : ""}`;
}

function clip(text: string, chars = DESCRIBE_CHARS): string {
  return text.length > chars ? `${text.slice(0, chars)}…` : text;
}
