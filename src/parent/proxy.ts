/**
 * The typed proxy: `s.query(...)` becomes `s.call("query", [...])`. The only
 * meta-programming in airlock lives here, with the reserved names it never
 * forwards.
 *
 * @module
 */

import { RESERVED_NAMES } from "../protocol/reserved.ts";
import type { CallOptions } from "./options.ts";

const RESERVED: ReadonlySet<string> = new Set(RESERVED_NAMES);

/**
 * The handlers of a worker definition type (`typeof db`), or the type itself
 * when it is a plain interface of methods (for workers in other languages).
 */
export type HandlersOf<D> = D extends { readonly handlers: infer H } ? H
  : D extends object ? D
  : Record<string, (...args: never[]) => unknown>;

/** The op names of a worker definition type. */
export type OpOf<D> = keyof HandlersOf<D> & string;

/** The parameters of a handler (its `this` context is not one). */
export type ArgsOf<F> = F extends (...args: infer A) => unknown ? A : never;

/** What a call to a handler resolves with. */
export type ResultOf<F> = F extends (...args: never[]) => infer R ? Awaited<R>
  : unknown;

/** One async method per handler. */
export type WorkerApi<D> = unknown extends D
  ? Record<string, (...args: unknown[]) => Promise<unknown>>
  : {
    readonly [K in OpOf<D>]: HandlersOf<D>[K] extends (
      ...args: never[]
    ) => unknown ? (
        ...args: ArgsOf<HandlersOf<D>[K]>
      ) => Promise<ResultOf<HandlersOf<D>[K]>>
      : never;
  };

/** The `call` method: an op by name, its arguments as a list, call options. */
export type WorkerCall<D> = unknown extends D ? (
    op: string,
    args?: unknown[],
    options?: CallOptions,
  ) => Promise<unknown>
  : <K extends OpOf<D>>(
    op: K,
    args: ArgsOf<HandlersOf<D>[K]>,
    options?: CallOptions,
  ) => Promise<ResultOf<HandlersOf<D>[K]>>;

/**
 * Wraps a handle so that any property it lacks (and that is not reserved)
 * is a function calling the op of that name.
 *
 * @typeParam T The handle.
 * @typeParam D The worker definition type.
 * @param handle The control surface.
 * @param call Calls an op.
 * @returns The handle with one method per op.
 */
export function withProxy<T extends object, D>(
  handle: T,
  call: (op: string, args: unknown[]) => Promise<unknown>,
): T & WorkerApi<D> {
  const methods = new Map<string, (...args: unknown[]) => Promise<unknown>>();
  return new Proxy(handle, {
    get(target, property, receiver) {
      if (
        typeof property !== "string" || property in target ||
        RESERVED.has(property)
      ) {
        return Reflect.get(target, property, receiver);
      }
      let method = methods.get(property);
      if (!method) {
        method = (...args: unknown[]) => call(property, args);
        methods.set(property, method);
      }
      return method;
    },
  }) as T & WorkerApi<D>;
}
