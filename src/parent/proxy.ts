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

/**
 * What a streaming handler yields: its return type is an async iterable or
 * a generator (or a promise of one). `never` for a handler that does not
 * stream (or whose return type is `any` or `never`).
 */
export type ItemOf<F> = F extends (...args: never[]) => infer R
  ? 0 extends 1 & R ? never // any: not known to stream
  : [Awaited<R>] extends [never] ? never
  : Awaited<R> extends AsyncIterable<infer I> ? I
  : Awaited<R> extends Generator<infer I, unknown, unknown> ? I
  : never
  : never;

/**
 * What awaiting a call to a handler gives: its value, or for a streaming
 * handler an array of every value it yields.
 */
export type ResultOf<F> = F extends (...args: never[]) => infer R
  ? [ItemOf<F>] extends [never] ? Awaited<R> : ItemOf<F>[]
  : unknown;

/**
 * A call to a streaming op: its values one by one with `for await`
 * (back-pressured, ended early by `break`), or all of them in an array when
 * awaited (at most 1,000,000 values or 64 MiB: past that the call is
 * cancelled and rejects with a `ProtocolError`, docs/streaming.md).
 */
export type StreamCall<I> = AsyncIterable<I> & PromiseLike<I[]> & {
  /** Like `Promise.prototype.catch`. */
  catch<B = never>(
    onRejected?: ((reason: unknown) => B | PromiseLike<B>) | null,
  ): Promise<I[] | B>;
  /** Like `Promise.prototype.finally`. */
  finally(onFinally?: (() => void) | null): Promise<I[]>;
};

/** What the typed proxy returns for a handler: a promise, or a stream call. */
export type CallOf<F> = [ItemOf<F>] extends [never] ? Promise<ResultOf<F>>
  : StreamCall<ItemOf<F>>;

/**
 * One method per handler: async for a plain handler, a {@linkcode StreamCall}
 * (`AsyncIterable<Item>`) for a streaming one.
 */
export type WorkerApi<D> = unknown extends D
  ? Record<string, (...args: unknown[]) => Promise<unknown>>
  : {
    readonly [K in OpOf<D>]: HandlersOf<D>[K] extends (
      ...args: never[]
    ) => unknown ? (
        ...args: ArgsOf<HandlersOf<D>[K]>
      ) => CallOf<HandlersOf<D>[K]>
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
 * The `stream` method: an op by name, its arguments, call options; the
 * values of the op's stream, one by one.
 */
export type WorkerStream<D> = unknown extends D ? (
    op: string,
    args?: unknown[],
    options?: CallOptions,
  ) => AsyncIterable<unknown>
  : <K extends OpOf<D>>(
    op: K,
    args: ArgsOf<HandlersOf<D>[K]>,
    options?: CallOptions,
  ) => AsyncIterable<ItemOf<HandlersOf<D>[K]>>;

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
  call: (op: string, args: unknown[]) => unknown,
): T & WorkerApi<D> {
  const methods = new Map<string, (...args: unknown[]) => unknown>();
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
