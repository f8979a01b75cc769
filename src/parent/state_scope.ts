/**
 * Stale-state detection: `watch` paths whose identity (device and inode, or
 * absence) is recorded at each worker start and checked before each call, and
 * state scopes that several sessions and pools share so one `invalidate()`
 * recycles every worker bound to the same data.
 *
 * @module
 */

import { detect } from "../runtime/detect.ts";
import { describe, toPath } from "../_validate.ts";

const SCOPE = Symbol.for("airlock.stateScope");

/**
 * Names the data a group of workers depends on. Pass it as the `scope`
 * option of sessions and pools: `invalidate()` then recycles every worker
 * bound to it, across all of them, and its paths are watched by each.
 */
export interface StateScope {
  /** The watched paths (absolute). */
  readonly paths: readonly string[];
  /** Counts invalidations; workers started before the latest are stale. */
  readonly generation: number;
  /**
   * Marks every worker bound to this scope stale: each session's and pool's
   * next call runs on a fresh worker (calls already running finish first).
   */
  invalidate(): void;
}

/** A path option: one path or file URL, or a list of them. */
export type PathsOption = string | URL | readonly (string | URL)[];

/**
 * Turns a `watch`-style option into absolute paths.
 *
 * @param value The option's value.
 * @param cwd What relative paths resolve against.
 * @param name The option's name, for errors.
 * @returns Absolute paths.
 * @throws {TypeError} when an entry is not a path or file URL.
 */
function resolvePaths(
  value: PathsOption | undefined,
  cwd: string,
  name: string,
): string[] {
  if (value === undefined) return [];
  const list = Array.isArray(value) ? value : [value];
  return list.map((item: unknown, index) =>
    toPath(Array.isArray(value) ? `${name}[${index}]` : name, item, cwd)
  );
}

/**
 * Creates a state scope: a name for data that several sessions and pools
 * depend on.
 *
 * @param paths Paths (files or directories) the data lives in; they are
 *   watched by every session and pool bound to the scope. May be empty, for
 *   a scope that is only invalidated explicitly.
 * @returns The scope.
 * @throws {TypeError} when a path is not a string or file URL.
 *
 * @example One invalidate() for every worker on the same data
 * ```ts
 * import { stateScope } from "@airlock/airlock";
 * import assert from "node:assert/strict";
 *
 * const data = stateScope("./data");
 * assert.equal(data.generation, 0);
 * data.invalidate(); // after an in-place migration
 * assert.equal(data.generation, 1);
 * ```
 */
export function stateScope(paths: PathsOption = []): StateScope {
  const resolved = Object.freeze(resolvePaths(paths, detect().cwd(), "paths"));
  let generation = 0;
  const scope = {
    paths: resolved,
    get generation() {
      return generation;
    },
    invalidate() {
      generation++;
    },
  };
  Object.defineProperty(scope, SCOPE, { value: true });
  return scope;
}

/**
 * Whether a value is a scope made by {@linkcode stateScope}.
 *
 * @param value Anything.
 * @returns Whether it is a scope.
 */
function isStateScope(value: unknown): value is StateScope {
  return typeof value === "object" && value !== null &&
    (value as Record<symbol, unknown>)[SCOPE] === true;
}

/** What a worker was started against. */
export interface StateStamp {
  /** Path identities at start. */
  readonly identities: string;
  /** Own plus scope invalidations at start. */
  readonly generation: number;
}

/** Why a worker is stale. */
export type StaleCause = "watch" | "invalidate";

/** Tracks the state workers depend on, for one session or pool. */
export class StateTracker {
  readonly #paths: readonly string[];
  readonly #scopes: readonly StateScope[];
  readonly #identity: (path: string) => string;
  #own = 0;

  /**
   * Creates a tracker.
   *
   * @param watch Watched paths (absolute).
   * @param scopes Scopes the session or pool is bound to.
   */
  constructor(
    watch: readonly string[],
    scopes: readonly StateScope[],
    identity: (path: string) => string,
  ) {
    this.#identity = identity;
    const paths = new Set(watch);
    for (const scope of scopes) for (const path of scope.paths) paths.add(path);
    this.#paths = [...paths];
    this.#scopes = scopes;
  }

  /** Whether anything is tracked at all. */
  get active(): boolean {
    return this.#paths.length > 0 || this.#scopes.length > 0 || this.#own > 0;
  }

  #generation(): number {
    let total = this.#own;
    for (const scope of this.#scopes) total += scope.generation;
    return total;
  }

  #identities(): string {
    const identity = this.#identity;
    if (this.#paths.length === 1) return identity(this.#paths[0] as string);
    let out = "";
    for (const path of this.#paths) out += `${identity(path)}|`;
    return out;
  }

  /**
   * Records the state as it is now, for a worker about to start.
   *
   * @returns The stamp.
   */
  stamp(): StateStamp {
    return { identities: this.#identities(), generation: this.#generation() };
  }

  /**
   * Whether a worker started with `stamp` is stale compared with `now`.
   *
   * @param stamp The worker's stamp.
   * @param now The state now (from {@linkcode StateTracker.stamp}).
   * @returns The cause, or `undefined` when it is current.
   */
  staleness(stamp: StateStamp, now: StateStamp): StaleCause | undefined {
    if (stamp.generation !== now.generation) return "invalidate";
    if (stamp.identities !== now.identities) return "watch";
    return undefined;
  }

  /** Marks every worker started so far stale. */
  invalidate(): void {
    this.#own++;
  }
}

/**
 * Resolves the `scope` option.
 *
 * @param value The option's value.
 * @returns The scopes.
 * @throws {TypeError} when an entry is not a state scope.
 */
export function resolveScopes(value: unknown): StateScope[] {
  if (value === undefined) return [];
  const list = Array.isArray(value) ? value : [value];
  return list.map((scope, index) => {
    if (!isStateScope(scope)) {
      throw new TypeError(
        `Invalid option "scope${
          Array.isArray(value) ? `[${index}]` : ""
        }": expected a stateScope(...), received ${describe(scope)}`,
      );
    }
    return scope;
  });
}

/** The stale-state options of sessions and pools. */
export interface StateOptions {
  /**
   * Paths (files or directories) the workers' state depends on. Their
   * identity (device, inode and birth time, or absence) is recorded when each
   * worker starts and checked (one `stat` per path) before each call; a
   * worker whose paths changed (deleted, recreated, replaced by rename) takes
   * no more calls and is replaced before the call runs: calls already running
   * finish on the old worker, `setup` is replayed on the new one. See
   * docs/modes.md.
   *
   * @default {[]}
   */
  watch?: PathsOption;
  /**
   * State scopes the session or pool is bound to: their paths are watched,
   * and their `invalidate()` replaces its workers.
   *
   * @default {[]}
   */
  scope?: StateScope | readonly StateScope[];
}

/**
 * Builds the tracker of a session or pool from its options.
 *
 * @param options The `watch` and `scope` options.
 * @param cwd What relative watch paths resolve against.
 * @param identity The runtime's path identity (`stat`).
 * @returns The tracker.
 * @throws {TypeError} when a path or scope is invalid.
 */
export function resolveTracker(
  options: StateOptions,
  cwd: string,
  identity: (path: string) => string,
): StateTracker {
  return new StateTracker(
    resolvePaths(options.watch, cwd, "watch"),
    resolveScopes(options.scope),
    identity,
  );
}
