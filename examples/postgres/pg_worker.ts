/**
 * The worker of the PostgreSQL example: the npm `pg` client, opened lazily
 * in the worker, and a native `connect(2)` (libc through the runtime's FFI)
 * to show that the grant holds for native code too.
 *
 * @module
 */

import pg from "pg";
import { defineWorker } from "../../worker.ts";

let client: pg.Client | undefined;

async function db(): Promise<pg.Client> {
  if (client) return client;
  const opened = new pg.Client({
    host: "127.0.0.1",
    port: Number(process.env.PGPORT),
    user: "airlock",
    database: "airlock",
  });
  await opened.connect();
  client = opened;
  return opened;
}

/** connect(2) to an IPv4 address from native code: 0, or the errno. */
async function nativeConnect(ipv4: string, port: number): Promise<number> {
  const bun = typeof (globalThis as { Bun?: unknown }).Bun === "object";
  const address = new Uint8Array(16);
  const view = new DataView(address.buffer);
  view.setUint16(0, 2, true); // AF_INET
  view.setUint16(2, port, false);
  ipv4.split(".").forEach((byte, i) => (address[4 + i] = Number(byte)));
  if (bun) {
    const specifier = "bun:ffi";
    const ffi = await import(specifier);
    const lib = ffi.dlopen("libc.so.6", {
      socket: { args: ["i32", "i32", "i32"], returns: "i32" },
      connect: { args: ["i32", "ptr", "u32"], returns: "i32" },
      close: { args: ["i32"], returns: "i32" },
      __errno_location: { args: [], returns: "ptr" },
    }).symbols;
    const fd = lib.socket(2, 1, 0);
    const result = lib.connect(fd, ffi.ptr(address), 16);
    const errno = ffi.read.i32(lib.__errno_location(), 0);
    lib.close(fd);
    return result === 0 ? 0 : errno;
  }
  const deno = (globalThis as unknown as { Deno: typeof Deno }).Deno;
  const lib = deno.dlopen("libc.so.6", {
    socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
    connect: { parameters: ["i32", "buffer", "u32"], result: "i32" },
    close: { parameters: ["i32"], result: "i32" },
    __errno_location: { parameters: [], result: "pointer" },
  }).symbols;
  const fd = lib.socket(2, 1, 0);
  const result = lib.connect(fd, address, 16);
  const errno = new deno.UnsafePointerView(lib.__errno_location()!).getInt32();
  lib.close(fd);
  return result === 0 ? 0 : errno;
}

export default defineWorker({
  async setUp(): Promise<void> {
    await (await db()).query(
      "create table if not exists notes (id serial primary key, body text)",
    );
  },
  async add(body: string): Promise<number> {
    const result = await (await db()).query(
      "insert into notes (body) values ($1) returning id",
      [body],
    );
    return result.rows[0].id as number;
  },
  async count(): Promise<number> {
    const result = await (await db()).query(
      "select count(*)::int as n from notes",
    );
    return result.rows[0].n as number;
  },
  /** A native connect to the database's port on another loopback address. */
  elsewhere(): Promise<number> {
    return nativeConnect("127.0.0.2", Number(process.env.PGPORT));
  },
  /** A native connect to the cloud metadata address. */
  metadata(): Promise<number> {
    return nativeConnect("169.254.169.254", 80);
  },
});
