/**
 * The messages of the protocol, a discriminated union on `type`, and their
 * checked decoding (their encoding into frames is encode_message.ts, which
 * does not load the decoder).
 * Pure: no I/O. See docs/PROTOCOL.md.
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";
import { decodeValue } from "./decode_value.ts";
import type { Frame } from "./frame_header.ts";

/** The request id reserved for control messages. */
export const CONTROL_ID = 0;

/**
 * The message version this code speaks, sent in the hello: 2 adds streams
 * (`items`, `end`, `credit`) and `progress` to version 1; 3 adds `limit`
 * (a worker of version 3 honours it); 4 adds `ping`/`pong` (the liveness
 * check) and `dropped` (a cancelled call that never started). The frame
 * layout has its own version (`PROTOCOL_VERSION` in frame_header.ts, still 1).
 */
export const MESSAGE_VERSION = 5;
/** The oldest message version a parent accepts in a hello. */
export const OLDEST_MESSAGE_VERSION = 1;
/** The first message version whose workers honour `limit`. */
export const LIMIT_MESSAGE_VERSION = 3;
/** The first message version whose workers answer `ping` and send `dropped`. */
export const LIVENESS_MESSAGE_VERSION = 4;
/** The first message version whose workers take the `pid` message. */
export const PID_MESSAGE_VERSION = 5;

/** The shortest gap between two `progress` messages of one call. */
export const PROGRESS_INTERVAL_MS = 50;

/** The worker is ready: first frame a worker writes. */
export interface HelloMessage {
  /** Discriminant. */
  type: "hello";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
  /** The protocol version the worker speaks. */
  version: number;
  /** The worker's own pid (inside a sandbox, the spawned pid is the sandbox's). */
  pid: number;
  /** The ops it serves. */
  ops: string[];
  /** The runtime and its version, e.g. `"deno 2.9.6"`. */
  runtime: string;
  /** Calls it runs at once. */
  concurrency: number;
  /** Ops the worker declares safe to run twice. */
  idempotent: string[];
}

/** The worker could not load its code; it exits after this. */
export interface FatalMessage {
  /** Discriminant. */
  type: "fatal";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
  /** What failed: loading the module, or its definition. */
  phase: "import" | "definition";
  /** The error. */
  error: Error;
}

/** Run `op` with `args`. */
export interface CallMessage {
  /** Discriminant. */
  type: "call";
  /** The request id, at least 1. */
  id: number;
  /** The handler to run. */
  op: string;
  /** Its arguments. */
  args: unknown[];
  /**
   * If the op streams: values in flight at most (absent: the default,
   * {@linkcode DEFAULT_STREAM_WINDOW_ITEMS}).
   */
  windowItems?: number;
  /**
   * If the op streams: payload bytes in flight at most (absent: the
   * default, {@linkcode DEFAULT_STREAM_WINDOW_BYTES}).
   */
  windowBytes?: number;
  /**
   * The W3C trace context of the caller's span, when the parent traces the
   * call (a subscriber to the `airlock:call` tracing channel set it): the
   * handler sees it as `this.traceContext`. Workers that do not trace
   * ignore it.
   */
  trace?: CallTrace;
}

/** The W3C trace context a call carries (`CallMessage.trace`). */
export interface CallTrace {
  /** The `traceparent` header: `00-<trace id>-<parent span id>-<flags>`. */
  traceparent: string;
  /** The `tracestate` header, if any. */
  tracestate?: string;
}

/** Longest `traceparent` or `tracestate` a worker accepts, in characters. */
const TRACE_MAX_CHARS = 1024;

/** A call's value. */
export interface ResultMessage {
  /** Discriminant. */
  type: "result";
  /** The request id it answers. */
  id: number;
  /** What the handler returned. */
  value: unknown;
}

/** A call's failure. */
export interface ErrorMessage {
  /** Discriminant. */
  type: "error";
  /** The request id it answers. */
  id: number;
  /** What the handler threw. */
  error: unknown;
}

/** The next values of a streaming call, in order (message version 2). */
export interface ItemsMessage {
  /** Discriminant. */
  type: "items";
  /** The request id of the streaming call. */
  id: number;
  /** One or more values the handler yielded. */
  values: unknown[];
}

/** A streaming call's handler finished: no more values (message version 2). */
export interface EndMessage {
  /** Discriminant. */
  type: "end";
  /** The request id it answers. */
  id: number;
}

/**
 * The parent consumed values of a stream: the worker may send that many
 * more (message version 2).
 */
export interface CreditMessage {
  /** Discriminant. */
  type: "credit";
  /** The request id of the streaming call. */
  id: number;
  /** Values consumed since the last credit. */
  items: number;
  /** Payload bytes of `items` frames released since the last credit. */
  bytes: number;
}

/** A handler reported progress; its call goes on (message version 2). */
export interface ProgressMessage {
  /** Discriminant. */
  type: "progress";
  /** The request id of the call. */
  id: number;
  /** What the handler reported. */
  value: unknown;
}

/** Abort the call with this id. */
export interface CancelMessage {
  /** Discriminant. */
  type: "cancel";
  /** The request id to abort. */
  id: number;
}

/**
 * Run at most `concurrency` calls at once, starting queued calls in the
 * order they arrived (message version 3). A parent that writes calls ahead
 * of a worker's free slots sends it before its first call.
 */
export interface LimitMessage {
  /** Discriminant. */
  type: "limit";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
  /** Calls the worker may run at once (at most its own `concurrency`). */
  concurrency: number;
}

/**
 * The liveness check (message version 4): the worker answers `pong` from
 * its event loop, at once, whatever its handlers are doing. A parent sends
 * it when a call times out; no answer within a short grace means the
 * worker's event loop is blocked.
 */
export interface PingMessage {
  /** Discriminant. */
  type: "ping";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
}

/** The answer to `ping` (message version 4). */
export interface PongMessage {
  /** Discriminant. */
  type: "pong";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
}

/**
 * A cancelled call that was still in the worker's queue: its handler never
 * started (message version 4). The call's only answer, instead of `error`.
 */
export interface DroppedMessage {
  /** Discriminant. */
  type: "dropped";
  /** The request id of the call. */
  id: number;
}

/**
 * The pid the parent reports the worker under (message version 5): inside
 * a sandbox's pid namespace a worker's own pid is not the host's, which its
 * logs, errors and `stats()` name. Sent once, right after the hello, before
 * any call; a handler reads it as `this.pid`.
 */
export interface PidMessage {
  /** Discriminant. */
  type: "pid";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
  /** The worker's pid as the parent sees it. */
  pid: number;
}

/** Finish what is in flight, acknowledge, exit. */
export interface ShutdownMessage {
  /** Discriminant. */
  type: "shutdown";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
}

/** Everything drained; the worker exits next. */
export interface ShutdownAckMessage {
  /** Discriminant. */
  type: "shutdown-ack";
  /** Always {@linkcode CONTROL_ID}. */
  id: 0;
}

/** Messages a worker writes. */
export type WorkerMessage =
  | HelloMessage
  | FatalMessage
  | ResultMessage
  | ErrorMessage
  | ItemsMessage
  | EndMessage
  | ProgressMessage
  | PongMessage
  | DroppedMessage
  | ShutdownAckMessage;

/** Messages a parent writes. */
export type ParentMessage =
  | CallMessage
  | CancelMessage
  | CreditMessage
  | LimitMessage
  | PingMessage
  | PidMessage
  | ShutdownMessage;

/** Every message of the protocol. */
export type Message = WorkerMessage | ParentMessage;

function fail(detail: string): never {
  throw new ProtocolError(`Cannot read message: ${detail}`);
}

function requireId(record: Record<string, unknown>, type: string): number {
  const id = record.id;
  if (
    typeof id !== "number" || !Number.isSafeInteger(id) || id < 0
  ) {
    fail(`"${type}" has an invalid id ${show(id)}`);
  }
  return id;
}

function requireControl(record: Record<string, unknown>, type: string): 0 {
  if (requireId(record, type) !== CONTROL_ID) {
    fail(`"${type}" must carry id 0`);
  }
  return CONTROL_ID;
}

function requireCallId(record: Record<string, unknown>, type: string): number {
  const id = requireId(record, type);
  if (id === CONTROL_ID) fail(`"${type}" uses the reserved id 0`);
  return id;
}

function requireString(
  record: Record<string, unknown>,
  key: string,
  type: string,
): string {
  const value = record[key];
  if (typeof value !== "string") fail(`"${type}" has no string "${key}"`);
  return value;
}

function stringList(
  record: Record<string, unknown>,
  key: string,
  type: string,
): string[] {
  const value = record[key];
  if (value === undefined) return [];
  if (!Array.isArray(value) || value.some((item) => typeof item !== "string")) {
    fail(`"${type}" has a "${key}" that is not a list of strings`);
  }
  return value as string[];
}

function requireCount(
  record: Record<string, unknown>,
  key: string,
  type: string,
): number {
  const value = record[key];
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    fail(`"${type}" has an invalid "${key}" ${show(value)}`);
  }
  return value;
}

function requireLimit(record: Record<string, unknown>): number {
  const value = record.concurrency;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    fail(`"limit" has an invalid "concurrency" ${show(value)}`);
  }
  return value;
}

function optionalWindow(
  record: Record<string, unknown>,
  key: "windowItems" | "windowBytes",
): number | undefined {
  const value = record[key];
  if (value === undefined) return undefined;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 1) {
    fail(`"call" has an invalid "${key}" ${show(value)}`);
  }
  return value;
}

function optionalTrace(record: Record<string, unknown>): CallTrace | undefined {
  const value = record.trace;
  if (value === undefined) return undefined;
  const trace = value as Record<string, unknown> | null;
  const traceparent = typeof trace === "object" && trace !== null
    ? trace.traceparent
    : undefined;
  const tracestate = typeof trace === "object" && trace !== null
    ? trace.tracestate
    : undefined;
  if (
    typeof traceparent !== "string" || traceparent.length > TRACE_MAX_CHARS ||
    (tracestate !== undefined &&
      (typeof tracestate !== "string" || tracestate.length > TRACE_MAX_CHARS))
  ) {
    fail(`"call" has an invalid "trace" ${show(value)}`);
  }
  return tracestate === undefined
    ? { traceparent }
    : { traceparent, tracestate };
}

/** Longest text of a wire value quoted in a message, in characters. */
const SHOW_CHARS = 60;

/**
 * A wire value for an error message, without calling anything on it
 * (`String({ toString: "x" })` throws).
 */
function show(value: unknown): string {
  try {
    return describe(value);
  } catch {
    // A proxy (a custom type's decode may return anything).
    return "a value that cannot be read";
  }
}

function describe(value: unknown): string {
  switch (typeof value) {
    case "string": {
      const cut = value.length > SHOW_CHARS
        ? `${value.slice(0, SHOW_CHARS)}…`
        : value;
      return JSON.stringify(cut);
    }
    case "number":
      return Object.is(value, -0) ? "-0" : String(value);
    case "bigint":
      return `${value}n`;
    case "boolean":
    case "undefined":
      return String(value);
    case "object":
      if (value === null) return "null";
      if (Array.isArray(value)) return `an array of ${value.length}`;
      if (value instanceof Error) return "an error";
      if (Object.getPrototypeOf(value) === Object.prototype) {
        return "an object";
      }
      return `a ${Object.prototype.toString.call(value).slice(8, -1)}`;
    default:
      return `a ${typeof value}`;
  }
}

/**
 * The error of a fatal message: the value itself when it is an error (the
 * decoder builds errors total and printable), an `Error` saying what was
 * sent otherwise. Total: returns for any value.
 */
function asError(value: unknown): Error {
  if (value instanceof Error) return value;
  return new Error(
    typeof value === "string"
      ? value
      : `worker reported a non-error value: ${show(value)}`,
  );
}

/** A `call`: its op, its arguments, its window and trace context. */
function decodeCall(record: Record<string, unknown>): CallMessage {
  const id = requireCallId(record, "call");
  const op = requireString(record, "op", "call");
  const args = record.args ?? [];
  if (!Array.isArray(args)) {
    fail(`"call" ${id} has args that are not a list`);
  }
  const call: CallMessage = { type: "call", id, op, args };
  const windowItems = optionalWindow(record, "windowItems");
  const windowBytes = optionalWindow(record, "windowBytes");
  if (windowItems !== undefined) call.windowItems = windowItems;
  if (windowBytes !== undefined) call.windowBytes = windowBytes;
  const trace = optionalTrace(record);
  if (trace !== undefined) call.trace = trace;
  return call;
}

/** A `hello`: the protocol version it speaks, its pid, ops and concurrency. */
function decodeHello(record: Record<string, unknown>): HelloMessage {
  const id = requireControl(record, "hello");
  const version = record.version;
  if (
    typeof version !== "number" || !Number.isSafeInteger(version) ||
    version < OLDEST_MESSAGE_VERSION || version > MESSAGE_VERSION
  ) {
    fail(
      `the worker speaks protocol version ${
        show(version)
      }, this parent speaks ${OLDEST_MESSAGE_VERSION} to ${MESSAGE_VERSION}`,
    );
  }
  const pid = record.pid;
  if (typeof pid !== "number" || !Number.isSafeInteger(pid) || pid < 0) {
    fail(`"hello" has an invalid pid ${show(pid)}`);
  }
  const concurrency = record.concurrency ?? 1;
  if (
    typeof concurrency !== "number" || !Number.isSafeInteger(concurrency) ||
    concurrency < 1
  ) {
    fail(`"hello" has an invalid concurrency ${show(concurrency)}`);
  }
  return {
    type: "hello",
    id,
    version,
    pid,
    ops: stringList(record, "ops", "hello"),
    runtime: typeof record.runtime === "string" ? record.runtime : "unknown",
    concurrency,
    idempotent: stringList(record, "idempotent", "hello"),
  };
}

/**
 * Decodes and checks one frame's message.
 *
 * @param frame The frame.
 * @returns The message.
 * @throws {ProtocolError} when the bytes are not a valid message.
 */
export function decodeMessage(frame: Frame): Message {
  const value = decodeValue(frame.head, frame.area);
  if (
    typeof value !== "object" || value === null || Array.isArray(value) ||
    Object.getPrototypeOf(value) !== Object.prototype
  ) {
    fail("the head is not a map");
  }
  const record = value as Record<string, unknown>;
  const type = record.type;
  switch (type) {
    case "call":
      return decodeCall(record);
    case "items": {
      const id = requireCallId(record, type);
      const values = record.values;
      if (!Array.isArray(values) || values.length === 0) {
        fail(`"items" ${id} has values that are not a non-empty list`);
      }
      return { type, id, values };
    }
    case "end":
      return { type, id: requireCallId(record, type) };
    case "credit":
      return {
        type,
        id: requireCallId(record, type),
        items: requireCount(record, "items", type),
        bytes: requireCount(record, "bytes", type),
      };
    case "progress":
      return { type, id: requireCallId(record, type), value: record.value };
    case "result":
      return { type, id: requireCallId(record, type), value: record.value };
    case "error":
      return { type, id: requireCallId(record, type), error: record.error };
    case "cancel":
      return { type, id: requireCallId(record, type) };
    case "hello":
      return decodeHello(record);
    case "fatal": {
      const id = requireControl(record, type);
      const phase = record.phase === "definition" ? "definition" : "import";
      return { type, id, phase, error: asError(record.error) };
    }
    case "limit":
      return {
        type,
        id: requireControl(record, type),
        concurrency: requireLimit(record),
      };
    case "shutdown":
      return { type, id: requireControl(record, type) };
    case "ping":
      return { type, id: requireControl(record, type) };
    case "pid": {
      const id = requireControl(record, type);
      const pid = requireCount(record, "pid", type);
      if (pid < 1) fail(`"pid" has an invalid "pid" ${show(pid)}`);
      return { type, id, pid };
    }
    case "pong":
      return { type, id: requireControl(record, type) };
    case "dropped":
      return { type, id: requireCallId(record, type) };
    case "shutdown-ack":
      return { type, id: requireControl(record, type) };
    default:
      fail(
        `unknown type ${
          typeof type === "string"
            ? JSON.stringify(type)
            : `of kind ${typeof type}`
        }`,
      );
  }
}
