/**
 * Small statistics helpers shared by the benchmark scripts. Pure.
 *
 * @module
 */

/** Latency summary of one round, in microseconds. */
export interface LatencySummary {
  /** Median. */
  p50: number;
  /** 99th percentile. */
  p99: number;
  /** Arithmetic mean. */
  mean: number;
}

/**
 * The value at quantile `q` of sorted values (nearest rank).
 *
 * @param sorted Values in ascending order.
 * @param q A quantile in [0, 1].
 * @returns The value.
 */
export function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return NaN;
  const index = Math.min(
    sorted.length - 1,
    Math.max(0, Math.ceil(q * sorted.length) - 1),
  );
  return sorted[index] as number;
}

/**
 * The median of values (the mean of the middle two for an even count).
 *
 * @param values The values, in any order.
 * @returns The median, or NaN for none.
 */
export function median(values: readonly number[]): number {
  const sorted = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return NaN;
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? sorted[middle] as number
    : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2;
}

/**
 * Summarises latency samples given in milliseconds as microseconds.
 *
 * @param samplesMs One sample per operation, in ms.
 * @returns p50, p99 and mean in µs.
 */
export function summarize(samplesMs: readonly number[]): LatencySummary {
  const sorted = [...samplesMs].sort((a, b) => a - b);
  let sum = 0;
  for (const value of sorted) sum += value;
  return {
    p50: quantile(sorted, 0.5) * 1000,
    p99: quantile(sorted, 0.99) * 1000,
    mean: sorted.length ? (sum / sorted.length) * 1000 : NaN,
  };
}
