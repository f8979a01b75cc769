/**
 * Long synchronous work cut into slices, so that a worker's start never
 * holds the parent's event loop for long (issue 23 item 4). Work is written
 * once as a generator that `yield`s between its steps;
 * {@linkcode runSteps} runs it to its end in one turn (the synchronous
 * callers), {@linkcode runStepsYielding} gives the loop a turn whenever
 * {@linkcode SLICE_MS} passed since the last one (a warm run, whose steps
 * are fast, never yields at all).
 *
 * @module
 */

/** The longest a slice of work runs before the event loop gets a turn. */
export const SLICE_MS = 3;

/** Steps of synchronous work, `yield`ing where the loop may run between them. */
export type Steps<T> = Generator<void, T, void>;

/**
 * Gives the event loop one turn: its due timers and its I/O run before this
 * settles (a macrotask, not a microtask).
 *
 * An immediate, not `setTimeout(0)`: a chain of zero timeouts is clamped
 * (to 4 ms per turn on Deno after five, as browsers do, and 1 ms on Bun),
 * and a first start takes dozens of turns.
 *
 * @returns When the loop had its turn.
 */
export function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Runs steps to their end in this turn.
 *
 * @param steps The work.
 * @returns Its result.
 * @throws What a step throws.
 */
export function runSteps<T>(steps: Steps<T>): T {
  while (true) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/**
 * Runs steps to their end, giving the event loop a turn between two steps
 * whenever {@linkcode SLICE_MS} passed since its last one.
 *
 * @param steps The work.
 * @returns Its result.
 * @throws What a step throws.
 */
export async function runStepsYielding<T>(steps: Steps<T>): Promise<T> {
  let since = performance.now();
  while (true) {
    const step = steps.next();
    if (step.done) return step.value;
    if (performance.now() - since >= SLICE_MS) {
      await nextTurn();
      since = performance.now();
    }
  }
}
