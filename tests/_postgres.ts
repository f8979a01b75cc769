// A throwaway PostgreSQL server on loopback for the tests that need a real
// database (the network grants): scripts/ci/start_postgres.sh makes a
// cluster in a directory of its own and starts it on 127.0.0.1, on a free
// port (as "nobody" when the tests run as root: root cannot run postgres).
// Tests that use it declare `needs("postgres")`.
import { execFile } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

/** A running server: where it listens and how to stop it. */
export interface PostgresServer extends AsyncDisposable {
  /** Always `"127.0.0.1"`. */
  readonly host: string;
  /** Its port. */
  readonly port: number;
  /** The user (trusted from 127.0.0.1, no password). */
  readonly user: string;
  /** The database. */
  readonly database: string;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}

const SCRIPT = new URL("../scripts/ci/start_postgres.sh", import.meta.url)
  .pathname;

function run(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile("bash", [SCRIPT, ...args], {
      timeout: 120_000,
      env: process.env,
    }, (error, stdout, stderr) => {
      if (error) {
        reject(
          new Error(`start_postgres.sh ${args.join(" ")} failed: ${stderr}`, {
            cause: error,
          }),
        );
      } else resolve(stdout);
    });
  });
}

/**
 * Starts a server (a few seconds: initdb, then the server).
 *
 * @returns The server; stop it in `after()`.
 */
export async function startPostgres(): Promise<PostgresServer> {
  // Directly under the temporary directory: "nobody" must reach it.
  const dir = join(
    tmpdir(),
    `airlock-pg-${process.pid}-${Math.random().toString(36).slice(2)}`,
  );
  const line = (await run([dir])).trim().split("\n").at(-1) ?? "";
  const info = JSON.parse(line) as {
    host: string;
    port: number;
    user: string;
    database: string;
  };
  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> =>
    stopped ??= run(["stop", dir]).then(() => {});
  return {
    ...info,
    stop,
    [Symbol.asyncDispose]: stop,
  };
}
