/**
 * Custom types: classes whose instances may cross between parent and
 * workers once registered with the same name on both sides.
 *
 * @module
 */

/**
 * A class whose instances may cross to and from workers, the equivalent of
 * superjson's `registerCustom`: register it with the same `name` in the
 * parent and in the worker (at the top of the worker module).
 *
 * @typeParam T The class's instances.
 * @typeParam D The plain data an instance becomes on the wire.
 */
export interface CustomType<T, D> {
  /** A name unique in the process, the same on both sides. */
  name: string;
  /** Whether a value is an instance (usually `value instanceof Class`). */
  is(value: unknown): boolean;
  /** The instance as data that can cross (plain objects, arrays, built-ins). */
  encode(value: T): D;
  /** The instance rebuilt from that data. */
  decode(data: D): T;
}

/** The process's registry of custom types. */
interface Registry {
  list: CustomType<unknown, unknown>[];
  byName: Map<string, CustomType<unknown, unknown>>;
}

/**
 * One registry per process, on a `Symbol.for` global: a Bun worker runs
 * airlock's worker side pre-bundled (its own copy of this module) while the
 * user's module registers its types through `@airlock/airlock/worker`.
 */
const REGISTRY_KEY = Symbol.for("airlock.customTypes");
const registry: Registry = ((globalThis as Record<symbol, unknown>)[
  REGISTRY_KEY
] ??= { list: [], byName: new Map() }) as Registry;
const CUSTOM_TYPES = registry.list;
const CUSTOM_BY_NAME = registry.byName;

/**
 * The registered type an object is an instance of, if any.
 *
 * @param v The object.
 * @returns The first registered type whose `is` accepts it.
 */
export function findCustomType(
  v: object,
): CustomType<unknown, unknown> | undefined {
  if (CUSTOM_TYPES.length === 0) return undefined;
  for (const type of CUSTOM_TYPES) if (type.is(v)) return type;
  return undefined;
}

/**
 * The registered type of a name, if any.
 *
 * @param name The name on the wire.
 * @returns The type.
 */
export function customTypeByName(
  name: string,
): CustomType<unknown, unknown> | undefined {
  return CUSTOM_BY_NAME.get(name);
}

/**
 * Lets instances of a class cross between parent and workers. Instances of
 * classes other than the built-ins are refused unless registered, since they
 * would arrive as plain objects without their prototype. Register the type
 * with the same name on both sides; a worker that receives a type it has not
 * registered breaks the protocol (the call fails with `WorkerCrashedError`).
 *
 * @typeParam T The class's instances.
 * @typeParam D The plain data an instance becomes on the wire.
 * @param type Its name and how to tell, encode and decode it.
 * @throws {TypeError} when a field is missing or the name is already registered.
 *
 * @example A class that crosses as its fields
 * ```ts
 * import { registerType } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * class Money {
 *   constructor(readonly cents: bigint, readonly currency: string) {}
 * }
 * registerType<Money, [bigint, string]>({
 *   name: "Money",
 *   is: (value): value is Money => value instanceof Money,
 *   encode: (money) => [money.cents, money.currency],
 *   decode: ([cents, currency]) => new Money(cents, currency),
 * });
 * assert.throws(() =>
 *   registerType({ name: "Money", is: () => false, encode: String, decode: String })
 * );
 * ```
 */
export function registerType<T, D>(type: CustomType<T, D>): void {
  if (typeof type !== "object" || type === null) {
    throw new TypeError(
      `Cannot register type: expected { name, is, encode, decode }, received ${typeof type}`,
    );
  }
  if (typeof type.name !== "string" || type.name === "") {
    throw new TypeError(
      `Cannot register type: "name" must be a non-empty string, received ${
        String(type.name)
      }`,
    );
  }
  for (const key of ["is", "encode", "decode"] as const) {
    if (typeof type[key] !== "function") {
      throw new TypeError(
        `Cannot register type "${type.name}": "${key}" must be a function`,
      );
    }
  }
  if (CUSTOM_BY_NAME.has(type.name)) {
    throw new TypeError(
      `Cannot register type "${type.name}": a type of that name is already registered`,
    );
  }
  const erased = type as unknown as CustomType<unknown, unknown>;
  CUSTOM_TYPES.push(erased);
  CUSTOM_BY_NAME.set(type.name, erased);
}
