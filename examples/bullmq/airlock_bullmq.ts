/**
 * A BullMQ processor that is an airlock pool call: the queue spreads jobs
 * over machines (each BullMQ `Worker` process pulls from Redis), airlock
 * isolates each job's native client in a worker process. The two retry
 * mechanisms are tied so that a job is never run twice by both:
 *
 * - airlock retries a call lost with its worker only when it had not
 *   started, or its op is idempotent (`idempotent`, up to `maxRetries`);
 * - what reaches this adapter has `executed` (`AirlockError.executed`):
 *   `"no"` (it never started: a start failure, a full queue, a deadline
 *   while queued) is thrown as is, so BullMQ retries it (`attempts`);
 *   `"maybe"` or `"yes"` (it started, or ran and threw) is thrown as is
 *   only for an op declared idempotent, and as BullMQ's
 *   `UnrecoverableError` otherwise: BullMQ then fails the job without
 *   running it again (its effect may have happened once).
 *
 * @module
 */

import { type Job, UnrecoverableError } from "bullmq";
import { AirlockError, type Pool } from "../../mod.ts";

/** Options of {@linkcode airlockProcessor}. */
export interface AirlockProcessorOptions {
  /**
   * Whether the op is safe to run twice: then BullMQ may retry a job whose
   * call started and failed. Declare it in the worker too (`idempotent` of
   * `defineWorker`) so airlock retries it across crashes.
   *
   * @default {false}
   */
  idempotent?: boolean;
  /** The call's arguments from the job (default: `[job.data]`). */
  args?: (job: Job) => unknown[];
}

/**
 * A BullMQ processor that runs each job as `pool.call(op, args)`.
 *
 * @param pool The airlock pool.
 * @param op The worker's op.
 * @param options Idempotence and the arguments.
 * @returns The processor, for `new Worker(queue, processor)`.
 */
export function airlockProcessor(
  // deno-lint-ignore no-explicit-any
  pool: Pool<any>,
  op: string,
  options: AirlockProcessorOptions = {},
): (job: Job) => Promise<unknown> {
  const args = options.args ?? ((job: Job) => [job.data]);
  return async (job: Job) => {
    try {
      return await pool.call(op, args(job));
    } catch (error: unknown) {
      const executed = error instanceof AirlockError ? error.executed : "maybe";
      if (executed === "no" || options.idempotent) throw error;
      // It may have run: never again, by BullMQ either.
      throw new UnrecoverableError(
        `Job ${job.id} not retried: ${op} ${
          executed === "yes" ? "ran and failed" : "may have run"
        } (${error instanceof Error ? error.message : String(error)})`,
      );
    }
  };
}
