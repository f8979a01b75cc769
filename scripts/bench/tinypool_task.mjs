/**
 * The trivial task of the pool reference (tinypool, `child_process` runtime).
 *
 * @module
 */

/**
 * Adds one.
 *
 * @param {number} value A number.
 * @returns {number} The number plus one.
 */
export default function addOne(value) {
  return value + 1;
}
