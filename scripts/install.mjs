// Installs the pinned development dependencies (deno, bun, test tools) with
// `npm ci` when they are missing or differ from package-lock.json. Run by the
// deno tasks before anything that needs them; plain Node.js, so it works on a
// machine that has only Node.js and npm.
//
// Staleness is decided by content, not file times: a fresh checkout (a clone,
// a git worktree sharing node_modules) has a newer package-lock.json than the
// install, and `npm ci` there would wipe an install that is already right.
import { execSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";

const marker = "node_modules/.package-lock.json";
const needed = ["node_modules/.bin/deno", "node_modules/.bin/bun"];

/** Why the install is stale, or undefined when it matches the lockfile. */
function staleness() {
  if (!existsSync(marker)) return "no install yet";
  const missing = needed.find((path) => !existsSync(path));
  if (missing) return `${missing} is missing`;
  let wanted, installed;
  try {
    wanted = JSON.parse(readFileSync("package-lock.json", "utf8")).packages ??
      {};
    installed = JSON.parse(readFileSync(marker, "utf8")).packages ?? {};
  } catch (error) {
    return `cannot read the lockfiles (${error.message})`;
  }
  for (const [path, entry] of Object.entries(wanted)) {
    if (path === "") continue;
    const have = installed[path];
    // Optional packages for other platforms are never installed.
    if (have === undefined) {
      if (entry.optional) continue;
      return `${path} is not installed`;
    }
    if (have.version !== entry.version) {
      return `${path} is ${have.version}, the lockfile says ${entry.version}`;
    }
  }
  return undefined;
}

const reason = staleness();
if (reason !== undefined) {
  process.stderr.write(`install: ${reason}; running npm ci\n`);
  execSync("npm ci --no-audit --no-fund --loglevel=error", {
    stdio: "inherit",
  });
}
