/**
 * Native code for the eval worker (`tests/fixtures/security/eval_worker.ts`):
 * a prelude that opens libc through the runtime's FFI (Bun's `bun:ffi`,
 * Deno's `Deno.dlopen`, which needs `ffi` granted) and defines `sys(name,
 * ...args)` (the call's result, with `errno` after a failure) and `cstr(text)`
 * (a NUL-terminated buffer). What a hostile worker's native client could do,
 * with no runtime check in between.
 *
 * @module
 */

/** libc functions the attacks call: name, argument types, result type. */
const SYMBOLS: Record<string, [string[], string]> = {
  socket: [["i32", "i32", "i32"], "i32"],
  connect: [["i32", "buffer", "u32"], "i32"],
  sendto: [["i32", "buffer", "u64", "i32", "buffer", "u32"], "i64"],
  send: [["i32", "buffer", "u64", "i32"], "i64"],
  recv: [["i32", "buffer", "u64", "i32"], "i64"],
  close: [["i32"], "i32"],
  chmod: [["buffer", "u32"], "i32"],
  chown: [["buffer", "u32", "u32"], "i32"],
  setxattr: [["buffer", "buffer", "buffer", "u64", "i32"], "i32"],
  system: [["buffer"], "i32"],
  prctl: [["i32", "u64", "u64", "u64", "u64"], "i32"],
  fork: [[], "i32"],
  "_exit": [["i32"], "void"],
  "__errno_location": [[], "pointer"],
};

/**
 * The prelude: JavaScript that, run first in the eval worker's `run`,
 * defines `sys` and `cstr`. `sys` returns `{ result, errno }`.
 */
export const NATIVE_PRELUDE: string = `
const SYMBOLS = ${JSON.stringify(SYMBOLS)};
let call;
let readErrno;
if (globalThis.Bun) {
  const ffi = await import("bun" + ":ffi");
  const defs = {};
  for (const [name, [args, result]] of Object.entries(SYMBOLS)) {
    defs[name] = {
      args: args.map((t) => t === "buffer" ? "ptr" : t === "pointer" ? "ptr" : t),
      returns: result === "pointer" ? "ptr" : result,
    };
  }
  const lib = ffi.dlopen("libc.so.6", defs).symbols;
  call = (name, args) => lib[name](...args);
  readErrno = () => ffi.read.i32(lib.__errno_location(), 0);
} else {
  const defs = {};
  for (const [name, [parameters, result]] of Object.entries(SYMBOLS)) {
    defs[name] = { parameters, result };
  }
  const lib = Deno.dlopen("libc.so.6", defs).symbols;
  call = (name, args) => lib[name](...args);
  readErrno = () => new Deno.UnsafePointerView(lib.__errno_location()).getInt32(0);
}
const sys = (name, ...args) => {
  const result = Number(call(name, args));
  return { result, errno: result < 0 ? readErrno() : 0 };
};
const cstr = (text) => new TextEncoder().encode(text + "\\0");
const sockaddrIn = (port) => {
  const addr = new Uint8Array(16);
  new DataView(addr.buffer).setUint16(0, 2, true);
  new DataView(addr.buffer).setUint16(2, port, false);
  addr.set([127, 0, 0, 1], 4);
  return addr;
};
`;
