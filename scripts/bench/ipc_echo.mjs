/**
 * The child of the IPC references (`Bun.spawn` with `ipc`, Node's
 * `child_process.fork`): sends every message straight back.
 *
 * @module
 */

import process from "node:process";

process.on("message", (message) => process.send(message));
process.on("disconnect", () => process.exit(0));
