/**
 * The progress throttle: a handler's `this.progress(value)` goes out at
 * once when the last report is older than `PROGRESS_INTERVAL_MS`; otherwise
 * the latest value waits for the interval's end, or for the call's answer,
 * whichever comes first.
 *
 * @module
 */

import { PROGRESS_INTERVAL_MS } from "../protocol/messages.ts";
import type { Outbox } from "./_outbox.ts";

/** A call's throttle state (kept on the call's record: no object per call). */
export interface ProgressState {
  /** When the last progress message went out. */
  progressAt: number;
  /** A progress value held back by the throttle. */
  progressPending: { value: unknown } | undefined;
  /** Sends the held-back progress value. */
  progressTimer: ReturnType<typeof setTimeout> | undefined;
  /** Set once the call's slot is free: later progress is dropped. */
  done: boolean;
}

/**
 * Reports progress: at once if the last report is older than the
 * throttle's interval, else the latest value goes when it ends (or before
 * the call's answer).
 */
export function reportProgress(
  outbox: Outbox,
  id: number,
  state: ProgressState,
  value: unknown,
): void {
  if (state.done) return;
  state.progressPending = { value };
  const wait = state.progressAt + PROGRESS_INTERVAL_MS - Date.now();
  if (wait <= 0) {
    // Encoded now, so a value that cannot cross throws into the handler.
    state.progressPending = undefined;
    state.progressAt = Date.now();
    void outbox.send({ type: "progress", id, value }).catch(() => {});
    return;
  }
  state.progressTimer ??= setTimeout(
    () => flushProgress(outbox, id, state),
    wait,
  );
}

/** Sends the progress value the throttle held back, if any. */
export function flushProgress(
  outbox: Outbox,
  id: number,
  state: ProgressState,
): void {
  if (state.progressTimer !== undefined) clearTimeout(state.progressTimer);
  state.progressTimer = undefined;
  const pending = state.progressPending;
  if (!pending) return;
  state.progressPending = undefined;
  state.progressAt = Date.now();
  const report = (error: unknown): void => {
    outbox.warn(
      `cannot send progress of call ${id}: ${
        error instanceof Error ? error.message : String(error)
      }`,
    );
  };
  try {
    outbox.send({ type: "progress", id, value: pending.value }).catch(report);
  } catch (error: unknown) {
    // A held-back value that cannot cross: the handler has moved on.
    report(error);
  }
}
