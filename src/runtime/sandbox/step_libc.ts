/**
 * The libc the runtime confine step (`step.ts`) calls through its runtime's
 * FFI (Deno's `Deno.dlopen`, Bun's `bun:ffi`), and the C strings and
 * pointer arrays it passes.
 *
 * @module
 */

/** `open(2)`'s close-on-exec flag. */
export const O_CLOEXEC = 0x80000;

/** The libc functions the step calls; every pointer is an address. */
export interface Libc {
  syscall(nr: number, a: Addr, b: Addr, c: Addr, d: Addr): number;
  prctl(option: number, a: Addr, b: Addr, c: Addr, d: Addr): number;
  open(path: Addr, flags: number, mode: number): number;
  close(fd: number): number;
  chdir(path: Addr): number;
  capset(header: Addr, data: Addr): number;
  geteuid(): number;
  execvpe(file: Addr, argv: Addr, envp: Addr): number;
  socket(domain: number, type: number, protocol: number): number;
  read(fd: number, buffer: Addr, length: number): number;
  write(fd: number, buffer: Addr, length: number): number;
  errno(): number;
  /** The address of a buffer, which the caller keeps alive. */
  address(buffer: Uint8Array): Addr;
  /** Reads a whole file (`/proc/self/environ`). */
  readFile(path: string): Uint8Array;
}

/** A pointer, as the runtime's FFI passes it. */
export type Addr = number | bigint;

const LIBC_NAMES = ["libc.so.6", "libc.musl-x86_64.so.1", "libc.so"];

/** What the step uses of the `Deno` global: FFI, its arguments, exit and stdio. */
export interface DenoFfi {
  dlopen(
    path: string,
    symbols: Record<string, { parameters: string[]; result: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => unknown> };
  UnsafePointer: {
    of(buffer: Uint8Array): unknown;
    value(pointer: unknown): number | bigint;
    create(address: number | bigint): unknown;
  };
  UnsafePointerView: new (pointer: unknown) => {
    getInt32(offset?: number): number;
  };
  readFileSync(path: string): Uint8Array;
  args: string[];
  exit(code: number): never;
  stderr: { writeSync(bytes: Uint8Array): number };
  stdout: { writeSync(bytes: Uint8Array): number };
}

interface BunFfi {
  dlopen(
    path: string,
    symbols: Record<string, { args: string[]; returns: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => unknown> };
  ptr(buffer: Uint8Array): number;
  read: { i32(address: number | bigint, offset?: number): number };
}

const SIGNATURES: Record<string, [string[], string]> = {
  syscall: [["i64", "u64", "u64", "u64", "u64"], "i64"],
  prctl: [["i32", "u64", "u64", "u64", "u64"], "i32"],
  open: [["u64", "i32", "i32"], "i32"],
  close: [["i32"], "i32"],
  chdir: [["u64"], "i32"],
  capset: [["u64", "u64"], "i32"],
  geteuid: [[], "u32"],
  execvpe: [["u64", "u64", "u64"], "i32"],
  read: [["i32", "u64", "u64"], "i64"],
  write: [["i32", "u64", "u64"], "i64"],
  socket: [["i32", "i32", "i32"], "i32"],
  "__errno_location": [[], "u64"],
};

function firstLibrary<T>(open: (name: string) => T): T {
  let last: unknown;
  for (const name of LIBC_NAMES) {
    try {
      return open(name);
    } catch (error: unknown) {
      last = error;
    }
  }
  throw new Error(
    `cannot load libc (tried ${LIBC_NAMES.join(", ")}): ${
      last instanceof Error ? last.message : String(last)
    }`,
  );
}

/** Opens libc through `Deno.dlopen`. */
export function denoLibc(deno: DenoFfi): Libc {
  const definitions: Record<string, { parameters: string[]; result: string }> =
    {};
  for (const [name, [parameters, result]] of Object.entries(SIGNATURES)) {
    definitions[name] = { parameters, result };
  }
  const lib = firstLibrary((name) => deno.dlopen(name, definitions)).symbols;
  return wrap(lib, {
    address: (buffer) =>
      deno.UnsafePointer.value(deno.UnsafePointer.of(buffer)),
    readI32: (address) =>
      new deno.UnsafePointerView(deno.UnsafePointer.create(address)).getInt32(
        0,
      ),
    readFile: (path) => deno.readFileSync(path),
  });
}

/** Opens libc through `bun:ffi`. */
export async function bunLibc(): Promise<Libc> {
  const specifier = "bun:ffi";
  const ffi = await import(specifier) as BunFfi;
  const definitions: Record<string, { args: string[]; returns: string }> = {};
  for (const [name, [args, returns]] of Object.entries(SIGNATURES)) {
    definitions[name] = { args, returns };
  }
  const lib = firstLibrary((name) => ffi.dlopen(name, definitions)).symbols;
  const address = (buffer: Uint8Array): Addr => ffi.ptr(buffer);
  const readI32 = (at: Addr): number => ffi.read.i32(Number(at), 0);
  return wrap(lib, {
    address,
    readI32,
    // Through libc, not node:fs: loading node:fs costs a Bun confine step
    // (every sandboxed Bun worker's start) about 3.5 ms of CPU.
    readFile: (path) => libcReadFile(lib, address, readI32, path),
  });
}

const EINTR = 4;

/** Reads a whole file (`/proc/self/environ`) with libc's open and read. */
function libcReadFile(
  lib: Record<string, (...args: unknown[]) => unknown>,
  address: (buffer: Uint8Array) => Addr,
  readI32: (at: Addr) => number,
  path: string,
): Uint8Array {
  const fn = (name: string): (...args: unknown[]) => unknown => {
    const found = lib[name];
    if (found === undefined) throw new Error(`libc has no ${name}`);
    return found;
  };
  const errno = (): number => readI32(Number(fn("__errno_location")()));
  const name = encoder.encode(`${path}\0`);
  const fd = Number(fn("open")(BigInt(address(name)), O_CLOEXEC, 0));
  if (fd < 0) throw new StepError(`cannot open ${path}`, errno());
  try {
    const chunks: Uint8Array[] = [];
    let total = 0;
    const buffer = new Uint8Array(64 * 1024);
    while (true) {
      const read = Number(
        fn("read")(fd, BigInt(address(buffer)), BigInt(buffer.byteLength)),
      );
      if (read < 0) {
        const code = errno();
        if (code === EINTR) continue;
        throw new StepError(`cannot read ${path}`, code);
      }
      if (read === 0) break;
      chunks.push(buffer.slice(0, read));
      total += read;
    }
    const bytes = new Uint8Array(total);
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.byteLength;
    }
    return bytes;
  } finally {
    fn("close")(fd);
  }
}

function wrap(
  lib: Record<string, (...args: unknown[]) => unknown>,
  io: {
    address(buffer: Uint8Array): Addr;
    readI32(address: Addr): number;
    readFile(path: string): Uint8Array;
  },
): Libc {
  const call = (name: string, ...args: unknown[]): number => {
    const fn = lib[name];
    if (fn === undefined) throw new Error(`libc has no ${name}`);
    return Number(fn(...args));
  };
  const big = (value: Addr): bigint => BigInt(value);
  return {
    syscall: (nr, a, b, c, d) =>
      call("syscall", BigInt(nr), big(a), big(b), big(c), big(d)),
    prctl: (option, a, b, c, d) =>
      call("prctl", option, big(a), big(b), big(c), big(d)),
    open: (path, flags, mode) => call("open", big(path), flags, mode),
    close: (fd) => call("close", fd),
    chdir: (path) => call("chdir", big(path)),
    capset: (header, data) => call("capset", big(header), big(data)),
    geteuid: () => call("geteuid"),
    execvpe: (file, argv, envp) =>
      call("execvpe", big(file), big(argv), big(envp)),
    socket: (domain, type, protocol) => call("socket", domain, type, protocol),
    read: (fd, buffer, length) => call("read", fd, big(buffer), big(length)),
    write: (fd, buffer, length) => call("write", fd, big(buffer), big(length)),
    errno: () => io.readI32(call("__errno_location")),
    address: io.address,
    readFile: io.readFile,
  };
}

/** An error of one libc call, with its errno. */
export class StepError extends Error {
  readonly errno: number;
  constructor(message: string, errno: number) {
    super(errno > 0 ? `${message} (errno ${errno})` : message);
    this.errno = errno;
  }
}

/** The step's one UTF-8 encoder. */
export const encoder: TextEncoder = new TextEncoder();

/** `text` as a NUL-terminated C string. */
export function cString(text: string): Uint8Array {
  const bytes = encoder.encode(text);
  const out = new Uint8Array(bytes.byteLength + 1);
  out.set(bytes);
  return out;
}

/**
 * A NULL-terminated array of pointers to NUL-terminated strings, and the
 * buffers it points into (kept alive by the caller).
 */
export function pointerArray(
  libc: Libc,
  strings: readonly Uint8Array[],
): { array: Uint8Array; keep: Uint8Array[] } {
  const array = new Uint8Array((strings.length + 1) * 8);
  const view = new DataView(array.buffer);
  const keep: Uint8Array[] = [];
  strings.forEach((bytes, index) => {
    const owned = bytes.at(-1) === 0 ? bytes : cStringBytes(bytes);
    keep.push(owned);
    view.setBigUint64(index * 8, BigInt(libc.address(owned)), true);
  });
  return { array, keep };
}

/** `bytes` with a NUL appended. */
export function cStringBytes(bytes: Uint8Array): Uint8Array {
  const out = new Uint8Array(bytes.byteLength + 1);
  out.set(bytes);
  return out;
}
