/**
 * (h): a CLI that imports airlock and exits; compared with `empty.ts`.
 *
 * @module
 */

import { session } from "../../mod.ts";

if (typeof session !== "function") throw new Error("airlock did not load");
