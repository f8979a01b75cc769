/**
 * Refusal diagnostics of the encoder: why a value cannot cross and where it
 * sits, turned into the `TypeError` callers see (with the path of the value
 * and, for a circular reference, the path it refers back to).
 *
 * @module
 */

import { MAX_DEPTH } from "./_tags.ts";

/** Longest path shown in an error message, in characters. */
const MAX_PATH_CHARS = 240;
const IDENTIFIER = /^[A-Za-z_$][\w$]*$/;

/** Why a value cannot cross, and where it sits (built while unwinding). */
export class Refusal extends Error {
  /** What was refused, with an article: `"a function"`. */
  readonly what: string;
  /** A short label for a placeholder: `"function"`. */
  readonly label: string;
  /** The path from the root, in segments (`.key`, `[1]`), prepended on unwind. */
  path = "";

  constructor(what: string, label: string) {
    super(what);
    this.name = "Refusal";
    this.what = what;
    this.label = label;
  }
}

/** The label of a refusal for depth (a cycle, usually: see findCycle). */
export const DEPTH_LABEL = "deeply nested value";

/** Why an object of another class cannot cross, naming its kind. */
export function refuseObject(v: object, proto: unknown): Refusal {
  if (v instanceof Promise) return new Refusal("a promise", "promise");
  for (
    const [ctor, name] of [
      [WeakMap, "WeakMap"],
      [WeakSet, "WeakSet"],
      [globalThis.WeakRef, "WeakRef"],
    ] as const
  ) {
    if (typeof ctor === "function" && v instanceof ctor) {
      return new Refusal(`a ${name}`, name);
    }
  }
  for (
    const [ctor, name] of [
      [Number, "Number"],
      [String, "String"],
      [Boolean, "Boolean"],
      [BigInt, "BigInt"],
      [Symbol, "Symbol"],
    ] as const
  ) {
    if (v instanceof ctor) {
      return new Refusal(`a boxed ${name}`, `boxed ${name}`);
    }
  }
  let name: unknown;
  try {
    const ctor = (proto as { constructor?: unknown }).constructor;
    if (typeof ctor === "function" && ctor.prototype === proto) {
      name = ctor.name;
    }
  } catch {
    name = undefined;
  }
  if (typeof name === "string" && name !== "") {
    return new Refusal(`an instance of ${name}`, `instance of ${name}`);
  }
  return new Refusal(
    "an object with a custom prototype",
    "object with a custom prototype",
  );
}

/** Adds a path segment to a refusal unwinding through a container. */
export function prependPath(error: unknown, segment: string): unknown {
  if (error instanceof Refusal) error.path = segment + error.path;
  return error;
}

/** The path segment of an object key: `.name` or `["odd key"]`. */
export function keySegment(key: string): string {
  if (key.length > 40) return `[${JSON.stringify(`${key.slice(0, 40)}…`)}]`;
  return IDENTIFIER.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`;
}

/** A short text of a Map key for a path: `.get("a")`. */
export function preview(key: unknown): string {
  switch (typeof key) {
    case "string":
      return JSON.stringify(key.length > 40 ? `${key.slice(0, 40)}…` : key);
    case "number":
      return Object.is(key, -0) ? "-0" : String(key);
    case "bigint":
      return `${key}n`;
    case "object":
      return key === null ? "null" : Array.isArray(key) ? "[…]" : "{…}";
    case "function":
      return "function";
    default:
      return String(key);
  }
}

/** A path as shown in a message, cut after 240 characters. */
function formatPath(path: string): string {
  if (path === "") return "value";
  const bare = path.startsWith(".") ? path.slice(1) : path;
  return bare.length > MAX_PATH_CHARS
    ? `${bare.slice(0, MAX_PATH_CHARS)}…`
    : bare;
}

/** Which way a value was going when it was refused. */
export type CrossingDirection = "to-worker" | "to-parent";

const CROSSING: Readonly<Record<CrossingDirection | "unknown", string>> = {
  "to-worker": "cannot cross to the worker",
  "to-parent": "cannot cross from the worker to the parent",
  "unknown": "cannot cross to another process",
};

/**
 * The `TypeError` a caller sees for a refusal: where the value sits, what it
 * is, and which way it was going.
 */
export function refusalToTypeError(
  refusal: Refusal,
  root: unknown,
  direction: CrossingDirection | undefined,
): TypeError {
  const crossing = CROSSING[direction ?? "unknown"];
  if (refusal.label === DEPTH_LABEL) {
    const cycle = findCycle(root);
    if (cycle !== undefined) {
      const target = cycle.target === ""
        ? "the value itself"
        : formatPath(cycle.target);
      return new TypeError(
        `Cannot send ${
          formatPath(cycle.path)
        }: a circular reference ${crossing} (it refers back to ${target})`,
      );
    }
  }
  const hint = refusal.label.startsWith("instance of ")
    ? "; send a plain object instead"
    : "";
  return new TypeError(
    `Cannot send ${
      formatPath(refusal.path)
    }: ${refusal.what} ${crossing}${hint}`,
  );
}

/**
 * Finds a circular reference below `root` the way the encoder walks it (cold
 * path: only after the encoder gave up on depth). Returns the path of the
 * reference and of the object it points back to.
 */
export function findCycle(
  root: unknown,
): { path: string; target: string } | undefined {
  const ancestors = new Map<object, string>();
  const done = new Set<object>();

  function visit(
    v: unknown,
    path: string,
    depth: number,
  ): { path: string; target: string } | undefined {
    if (typeof v !== "object" || v === null || v instanceof Error) {
      return undefined;
    }
    const target = ancestors.get(v);
    if (target !== undefined) return { path, target };
    if (done.has(v) || depth > MAX_DEPTH + 1) return undefined;
    ancestors.set(v, path);
    try {
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) {
          const found = visit(v[i], `${path}[${i}]`, depth + 1);
          if (found) return found;
        }
      } else if (v instanceof Map) {
        let i = 0;
        for (const [key, value] of v) {
          const found = visit(key, `${path}.keys()[${i++}]`, depth + 1) ??
            visit(value, `${path}.get(${preview(key)})`, depth + 1);
          if (found) return found;
        }
      } else if (v instanceof Set) {
        let i = 0;
        for (const item of v) {
          const found = visit(item, `${path}.values()[${i++}]`, depth + 1);
          if (found) return found;
        }
      } else {
        const proto: unknown = Object.getPrototypeOf(v);
        if (proto === Object.prototype || proto === null) {
          for (const key of Object.keys(v)) {
            const found = visit(
              (v as Record<string, unknown>)[key],
              path + keySegment(key),
              depth + 1,
            );
            if (found) return found;
          }
        }
      }
    } catch {
      // A throwing getter: this branch has nothing more to tell.
    } finally {
      ancestors.delete(v);
    }
    done.add(v);
    return undefined;
  }

  return visit(root, "", 1);
}
