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
 * Whether an immediate gives the loop a turn that reads I/O: on Bun it
 * does. Deno's loop (tokio) reads I/O when it has nothing ready to run,
 * or every 61 tasks: a chain of immediates went 63 turns before a pipe's
 * data was read, so a start there would hold back the answers of the
 * parent's other workers.
 */
const IMMEDIATE_READS_IO = "Bun" in globalThis;

/**
 * On Deno, the longest a run of immediates may go on, in ms, before a turn
 * waits on a timer (which lets the loop read I/O).
 */
const IO_TURN_EVERY_MS = 2;

/** When Deno's loop last waited on one of these timers. */
let lastTimerTurn = -Infinity;

/**
 * Gives the event loop one turn: its due timers and its I/O run before this
 * settles (a macrotask, not a microtask).
 *
 * An immediate, not a zero timeout, where it can: zero timeouts cost 1 ms
 * a turn on Bun and ~2.2 ms on Deno, and a start takes up to dozens of
 * turns. On Deno a turn waits on a zero timeout when
 * {@linkcode IO_TURN_EVERY_MS} passed since the last did, so that I/O is
 * read at least that often.
 *
 * @returns When the loop had its turn.
 */
export function nextTurn(): Promise<void> {
  if (
    IMMEDIATE_READS_IO ||
    performance.now() - lastTimerTurn < IO_TURN_EVERY_MS
  ) return new Promise((resolve) => setImmediate(resolve));
  return new Promise((resolve) =>
    setTimeout(() => {
      lastTimerTurn = performance.now();
      resolve();
    }, 0)
  );
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
