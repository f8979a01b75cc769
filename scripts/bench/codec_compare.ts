// deno-lint-ignore-file no-console
/**
 * Compares the wire codec with superjson, msgpackr, cbor-x and plain JSON on
 * one encode + decode of a 1,000-row payload, and prints a markdown table.
 *
 * ```sh
 * node_modules/.bin/deno run -A scripts/bench/codec_compare.ts
 * node_modules/.bin/bun scripts/bench/codec_compare.ts
 * ```
 *
 * @module
 */

import superjson from "superjson";
import { Packr } from "msgpackr";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import { encodeValue } from "../../src/protocol/encode_value.ts";

const ROWS = 1000;
const WARMUP_ROUNDS = 20;
const ROUNDS = 30;

interface Row {
  id: number;
  at: Date;
  tags: Map<string, number>;
  big: bigint;
  nested: unknown[];
}

function makePayload(): Row[] {
  const rows: Row[] = [];
  for (let i = 0; i < ROWS; i++) {
    rows.push({
      id: i,
      at: new Date(),
      tags: new Map([["a", 1], ["b", 2]]),
      big: 12345678901234567890n,
      nested: [[1, 2, [3, "x"]], { deep: [true, null] }],
    });
  }
  return rows;
}

interface Contender {
  name: string;
  note: string;
  /** Encodes and decodes the payload once; returns the decoded value. */
  roundTrip(payload: Row[]): unknown;
}

interface DenoLike {
  args: string[];
  execPath(): string;
  exit(code: number): never;
  Command: new (
    command: string,
    options: { args: string[]; stdout: "piped"; stderr: "piped" },
  ) => {
    outputSync(): { code: number; stdout: Uint8Array; stderr: Uint8Array };
  };
}
interface BunLike {
  argv: string[];
  spawnSync(
    command: string[],
    options: { stdout: "pipe"; stderr: "pipe" },
  ): { exitCode: number | null; stdout: Uint8Array; stderr: Uint8Array };
}
const denoGlobal = (globalThis as { Deno?: DenoLike }).Deno;
const bunGlobal = (globalThis as { Bun?: BunLike }).Bun;

function runtimeArgs(): string[] {
  return bunGlobal?.argv ?? denoGlobal?.args ?? [];
}

function exit(code: number): never {
  if (denoGlobal !== undefined && bunGlobal === undefined) {
    return denoGlobal.exit(code);
  }
  return (globalThis as unknown as { process: { exit(code: number): never } })
    .process.exit(code);
}

/** Runs this script again with `flag`; returns "ok" or why it failed. */
function probeChild(flag: string): string {
  const script = new URL(import.meta.url).pathname;
  let code: number | null;
  let output: string;
  if (bunGlobal !== undefined) {
    const execPath =
      (globalThis as unknown as { process: { execPath: string } }).process
        .execPath;
    const result = bunGlobal.spawnSync([execPath, script, flag], {
      stdout: "pipe",
      stderr: "pipe",
    });
    code = result.exitCode;
    output = new TextDecoder().decode(result.stdout) +
      new TextDecoder().decode(result.stderr);
  } else if (denoGlobal !== undefined) {
    const result = new denoGlobal.Command(denoGlobal.execPath(), {
      args: ["run", "-A", script, flag],
      stdout: "piped",
      stderr: "piped",
    }).outputSync();
    code = result.code;
    output = new TextDecoder().decode(result.stdout) +
      new TextDecoder().decode(result.stderr);
  } else {
    return "unknown runtime";
  }
  if (code === 0) return "ok";
  const lines = output.split("\n").map((l) => l.trim());
  const line =
    lines.find((l) => /^(error|\w*Error)\b|symbol lookup error/.test(l)) ??
      lines.filter((l) => l !== "").at(-1) ?? "";
  return `exit code ${code}: ${line.slice(0, 160)}`;
}

function concat(chunks: Uint8Array[], total: number): Uint8Array {
  const out = new Uint8Array(total);
  let offset = 0;
  for (const chunk of chunks) {
    out.set(chunk, offset);
    offset += chunk.length;
  }
  return out;
}

const contenders: Contender[] = [
  {
    name: "airlock codec",
    note: "lossless",
    roundTrip(payload) {
      const message = { type: "result", id: 1, value: payload };
      const { head, attachments, attachmentBytes } = encodeValue(message);
      return decodeValue(head, concat(attachments, attachmentBytes));
    },
  },
  {
    name: "superjson",
    note: "lossless, JSON text",
    roundTrip(payload) {
      const message = { type: "result", id: 1, value: payload };
      return superjson.parse(superjson.stringify(message));
    },
  },
];

const packrPlain = new Packr({ moreTypes: true, useRecords: false });
contenders.push({
  name: "msgpackr (no records)",
  note: "moreTypes, useRecords false: lossy, a Map comes back as an object",
  roundTrip(payload) {
    const message = { type: "result", id: 1, value: payload };
    return packrPlain.unpack(packrPlain.pack(message));
  },
});
const packrRecords = new Packr({ moreTypes: true });
contenders.push({
  name: "msgpackr (records)",
  note: "moreTypes, records: the closest lossless setting",
  roundTrip(payload) {
    const message = { type: "result", id: 1, value: payload };
    return packrRecords.unpack(packrRecords.pack(message));
  },
});

// cbor-x loads a native add-on that can take the whole process down (a
// symbol lookup error on Deno), so it is tried in a child process first. It
// is not a dependency of this repository (npm 11 refuses `npm ci` with its
// optional add-on packages in the lockfile): `npm install --no-save cbor-x`
// to include it. The specifier is computed so that neither runtime resolves
// it before it is needed.
const CBOR_X = ["cbor", "x"].join("-");
interface CborX {
  Encoder: new (options: { useRecords: boolean }) => {
    encode(value: unknown): Uint8Array;
    decode(bytes: Uint8Array): unknown;
  };
}
const PROBE_FLAG = "--probe-cbor-x";
const args = runtimeArgs();
if (args.includes(PROBE_FLAG)) {
  const { Encoder } = await import(CBOR_X) as CborX;
  const encoder = new Encoder({ useRecords: false });
  const rows = makePayload();
  const decoded = encoder.decode(encoder.encode(rows)) as Row[];
  const ok = decoded.length === ROWS && decoded[ROWS - 1]?.id === ROWS - 1 &&
    decoded[7]?.tags instanceof Map && decoded[7].nested.length === 2;
  console.log(ok ? "ok" : "wrong result");
  exit(ok ? 0 : 1);
}
const probe = probeChild(PROBE_FLAG);
let cborNote = "";
if (probe === "ok") {
  const { Encoder } = await import(CBOR_X) as CborX;
  const encoder = new Encoder({ useRecords: false });
  contenders.push({
    name: "cbor-x",
    note: "useRecords false",
    roundTrip(payload) {
      const message = { type: "result", id: 1, value: payload };
      return encoder.decode(encoder.encode(message));
    },
  });
} else {
  cborNote =
    `cbor-x skipped: not installed, or its native add-on failed in a child process (${probe})`;
}

contenders.push({
  name: "JSON",
  note: "lossy (reference only)",
  roundTrip(payload) {
    const message = { type: "result", id: 1, value: payload };
    return JSON.parse(JSON.stringify(message, (_key, value: unknown) => {
      if (typeof value === "bigint") return value.toString();
      if (value instanceof Map) return Object.fromEntries(value);
      return value;
    }));
  },
});

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1
    ? sorted[middle]!
    : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

const payload = makePayload();
const results: { contender: Contender; ms: number }[] = [];
for (const contender of contenders) {
  for (let i = 0; i < WARMUP_ROUNDS; i++) contender.roundTrip(payload);
  const times: number[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const start = performance.now();
    contender.roundTrip(payload);
    times.push(performance.now() - start);
  }
  results.push({ contender, ms: median(times) });
}

const runtime = "Bun" in globalThis
  ? `bun ${(globalThis as unknown as { Bun: { version: string } }).Bun.version}`
  : `deno ${
    (globalThis as unknown as { Deno: { version: { deno: string } } }).Deno
      .version.deno
  }`;
const baseline = results.find((r) => r.contender.name === "superjson")!.ms;
console.log(
  `\n${runtime}: encode + decode of ${ROWS} rows, median of ${ROUNDS} rounds\n`,
);
console.log("| codec | ms | speed vs superjson | notes |");
console.log("| --- | ---: | ---: | --- |");
for (const { contender, ms } of results) {
  console.log(
    `| ${contender.name} | ${ms.toFixed(3)} | ${
      (baseline / ms).toFixed(1)
    }× | ${contender.note} |`,
  );
}
if (cborNote !== "") console.log(`\n${cborNote}`);
