/**
 * Placement and health of a pool's launchers (`launchers` option): which
 * launcher the next worker starts through, and when one is set aside. Pure
 * policy over plain data (no I/O, no timers): the pool feeds it the
 * outcome of each start and each early exit, and the time. Private to
 * src/parent.
 *
 * Placement is least loaded: a new worker goes to the launcher in service
 * with the fewest workers serving or starting on it (ties to the lowest
 * index). Health is a circuit breaker per launcher: after
 * {@linkcode START_FAILURES_TO_SET_ASIDE} failed starts in a row (a worker
 * that dies unasked within {@linkcode EARLY_EXIT_MS} of its start counts as
 * one) the launcher is set aside for a backoff, starting at
 * {@linkcode BACKOFF_FIRST_MS} and doubling up to {@linkcode BACKOFF_MAX_MS};
 * once it has passed, the next start tries it again: a success puts it back
 * in service, a failure sets it aside for the doubled backoff.
 *
 * @module
 */

/** Failed starts in a row that set a launcher aside. */
export const START_FAILURES_TO_SET_ASIDE = 2;

/**
 * A worker that exits without being asked this soon after it was ready
 * died at connect: it counts as a failed start of its launcher.
 */
export const EARLY_EXIT_MS = 2_000;

/** The first backoff of a launcher set aside, in ms. */
export const BACKOFF_FIRST_MS = 1_000;

/** The longest backoff, in ms. */
export const BACKOFF_MAX_MS = 30_000;

/** How much of each launcher's last failure the all-aside error quotes. */
const FAILURE_CHARS = 300;

/** What the pool knows of one launcher's health. */
export interface LauncherHealth {
  /** Failed starts in a row (reset by a start that succeeds). */
  failures: number;
  /** Until when it is set aside (ms since the epoch; 0 when in service). */
  asideUntil: number;
  /** The backoff it gets when it is set aside next, in ms. */
  backoffMs: number;
  /** Its last failure (an error), `undefined` before any. */
  lastFailure: unknown;
}

/**
 * A launcher's health before any start.
 *
 * @returns Its health: in service, no failure.
 */
export function freshHealth(): LauncherHealth {
  return {
    failures: 0,
    asideUntil: 0,
    backoffMs: BACKOFF_FIRST_MS,
    lastFailure: undefined,
  };
}

/**
 * Whether a launcher may be given a start now.
 *
 * @param health Its health.
 * @param now The time (ms since the epoch).
 * @returns Whether it is in service (never set aside, or its backoff passed).
 */
export function inService(health: LauncherHealth, now: number): boolean {
  return health.asideUntil <= now;
}

/**
 * The launcher the next worker starts through: the least loaded one in
 * service, ties to the lowest index.
 *
 * @param health Each launcher's health.
 * @param load Workers serving or starting on each launcher.
 * @param now The time (ms since the epoch).
 * @returns Its index, or `undefined` when every launcher is set aside.
 */
export function pickLauncher(
  health: readonly LauncherHealth[],
  load: readonly number[],
  now: number,
): number | undefined {
  let best: number | undefined;
  for (let index = 0; index < health.length; index++) {
    if (!inService(health[index] as LauncherHealth, now)) continue;
    if (best === undefined || (load[index] ?? 0) < (load[best] ?? 0)) {
      best = index;
    }
  }
  return best;
}

/**
 * Records a failed start (or a worker that died at connect).
 *
 * @param health The launcher's health, updated in place.
 * @param failure The error.
 * @param now The time (ms since the epoch).
 * @returns Whether the launcher was set aside by it.
 */
export function recordFailure(
  health: LauncherHealth,
  failure: unknown,
  now: number,
): boolean {
  health.failures++;
  health.lastFailure = failure;
  if (health.failures < START_FAILURES_TO_SET_ASIDE) return false;
  health.asideUntil = now + health.backoffMs;
  health.backoffMs = Math.min(2 * health.backoffMs, BACKOFF_MAX_MS);
  return true;
}

/**
 * Records a start that succeeded: the launcher is in service, its backoff
 * starts over.
 *
 * @param health The launcher's health, updated in place.
 */
export function recordSuccess(health: LauncherHealth): void {
  health.failures = 0;
  health.asideUntil = 0;
  health.backoffMs = BACKOFF_FIRST_MS;
}

/**
 * Whether an exit counts against the worker's launcher: unasked, within
 * {@linkcode EARLY_EXIT_MS} of the worker being ready.
 *
 * @param requested Whether the exit was asked for.
 * @param readyAt When the worker was ready (ms since the epoch).
 * @param now The time of the exit.
 * @returns Whether it died at connect.
 */
export function diedAtConnect(
  requested: boolean,
  readyAt: number,
  now: number,
): boolean {
  return !requested && now - readyAt < EARLY_EXIT_MS;
}

/**
 * The sentence naming each launcher's last failure, for the error calls
 * get when every launcher is set aside.
 *
 * @param launchers The launchers (argv prefixes, or transports by name).
 * @param health Their health, by index.
 * @param now The time (ms since the epoch).
 * @returns One clause per launcher, joined by "; ".
 */
export function describeLaunchers(
  launchers: readonly (readonly string[] | { readonly name: string })[],
  health: readonly LauncherHealth[],
  now: number,
): string {
  return launchers.map((launcher, index) => {
    const state = health[index] as LauncherHealth;
    const text = state.lastFailure instanceof Error
      ? state.lastFailure.message
      : state.lastFailure === undefined
      ? "no failure yet"
      : String(state.lastFailure);
    // Its first line, bounded: a start error may end with a stderr tail.
    const line = text.split("\n", 1)[0] ?? "";
    const failure = line.length > FAILURE_CHARS
      ? `${line.slice(0, FAILURE_CHARS)}…`
      : line;
    const aside = inService(state, now)
      ? "in service"
      : `set aside for ${Math.ceil((state.asideUntil - now) / 1000)} s more`;
    const name = "name" in launcher ? launcher.name : launcher.join(" ");
    return `launcher ${index} (${JSON.stringify(name)}, ${aside}): ${failure}`;
  }).join("; ");
}
