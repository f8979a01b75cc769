/**
 * The confine step a worker is started through when Landlock confines it:
 * applies the Landlock ruleset and the seccomp filter its argument names to
 * itself, then execs the worker's command. See
 * `src/runtime/sandbox/step.ts`.
 *
 * @module
 */

import { runConfineStep } from "../src/runtime/sandbox/step.ts";

await runConfineStep();
