// deno-lint-ignore-file no-console
/**
 * A real PostgreSQL server reached through a `net` grant by host and port:
 * the worker's `pg` client connects to 127.0.0.1:PORT through the parent's
 * native relay, where its broker allows, and its native code reaches nothing
 * else. Starts a throwaway server with scripts/ci/start_postgres.sh (needs
 * Debian's postgresql; bubblewrap for the OS sandbox). Exits 1 if a claim
 * does not hold.
 *
 * ```sh
 * deno run -A main.ts   # or: bun main.ts
 * ```
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import dc from "node:diagnostics_channel";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import {
  DIAGNOSTICS_CHANNELS,
  type NetConnectionEvent,
} from "../../diagnostics.ts";
import { session } from "../../mod.ts";
import type pgWorker from "./pg_worker.ts";

function check(condition: boolean, claim: string): void {
  if (!condition) {
    console.error(`claim does not hold: ${claim}`);
    process.exit(1);
  }
}

const script = new URL("../../scripts/ci/start_postgres.sh", import.meta.url)
  .pathname;
const dir = join(tmpdir(), `airlock-example-pg-${process.pid}`);
const server = JSON.parse(
  execFileSync("bash", [script, dir], { encoding: "utf8" }).trim(),
) as { port: number };
const events: NetConnectionEvent[] = [];
const channel = dc.channel(DIAGNOSTICS_CHANNELS.netConnection);
const onEvent = (message: unknown) => {
  events.push(message as NetConnectionEvent);
};
channel.subscribe(onEvent);
try {
  await using db = await session<typeof pgWorker>(
    new URL("./pg_worker.ts", import.meta.url),
    {
      env: { PGPORT: String(server.port) },
      // The database and nothing else; ffi for the native connect (Deno).
      permissions: { net: [`127.0.0.1:${server.port}`], ffi: true },
    },
  );
  await db.setUp();
  for (const body of ["one", "two", "three"]) await db.add(body);
  const count = await db.count();
  console.log(`${count} notes in PostgreSQL on 127.0.0.1:${server.port}`);
  check(count >= 3, "the granted server answers queries");
  const elsewhere = await db.elsewhere();
  const metadata = await db.metadata();
  console.log(
    `native connect(2) to 127.0.0.2:${server.port}: errno ${elsewhere}; to 169.254.169.254:80: errno ${metadata}`,
  );
  check(elsewhere !== 0 && metadata !== 0, "native code reaches nothing else");
} finally {
  // The broker publishes a connection when it ends: the client's ended
  // with the worker.
  const until = Date.now() + 5_000;
  while (events.length === 0 && Date.now() < until) {
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  channel.unsubscribe(onEvent);
  execFileSync("bash", [script, "stop", dir]);
}
const [event] = events;
console.log(
  `broker: ${events.length} connection(s); the first reached ${event?.address}:${event?.port}, ${event?.bytesOut} bytes out, ${event?.bytesIn} in, ${
    event?.durationMs.toFixed(0)
  } ms`,
);
check(
  events.length > 0 && events.every((e) => e.refused === undefined),
  "each connection was the granted one",
);
