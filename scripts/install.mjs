// Installs the pinned development dependencies (deno, bun, test tools) with
// `npm ci` when they are missing or older than package-lock.json. Run by the
// deno tasks before anything that needs them; plain Node.js, so it works on a
// machine that has only Node.js and npm.
import { execSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";

const marker = "node_modules/.package-lock.json";
const needed = ["node_modules/.bin/deno", "node_modules/.bin/bun"];
const stale = !existsSync(marker) ||
  statSync(marker).mtimeMs < statSync("package-lock.json").mtimeMs ||
  needed.some((path) => !existsSync(path));
if (stale) {
  execSync("npm ci --no-audit --no-fund --loglevel=error", {
    stdio: "inherit",
  });
}
