// deno-lint-ignore-file no-console
/**
 * A bare runtime process that stays idle, for the memory reference of (g):
 * prints one line once running, then waits until it is killed (at most 60 s).
 *
 * @module
 */

console.log("ready");
setTimeout(() => {}, 60_000);
