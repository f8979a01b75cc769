/**
 * Errors rebuilt from the wire: the fields of an error (tag 27001) become an
 * instance of the matching standard class, with the name, message, stack,
 * cause and own properties it was sent with.
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";
import { MAX_ERROR_CHAIN } from "./_tags.ts";

const ERROR_CLASSES = new Map<string, ErrorConstructor>([
  ["Error", Error],
  ["TypeError", TypeError],
  ["RangeError", RangeError],
  ["SyntaxError", SyntaxError],
  ["ReferenceError", ReferenceError],
  ["EvalError", EvalError],
  ["URIError", URIError],
]);

/**
 * Methods an error inherits from `Error.prototype` and `Object.prototype`
 * (`toString`, `valueOf`, `constructor`, `hasOwnProperty` …): an own
 * property of that name, which is never a function on the wire, would break
 * them (`String(error)` throws when `toString` is not a function).
 */
const INHERITED_METHODS: ReadonlySet<string> = new Set(
  [Object.prototype, Error.prototype].flatMap((proto) =>
    Object.getOwnPropertyNames(proto).filter((name) =>
      typeof Object.getOwnPropertyDescriptor(proto, name)?.value === "function"
    )
  ),
);

/**
 * Rebuilds an error from the fields it crossed the wire with: a standard
 * class when `name` names one (`TypeError`, `AggregateError` with its
 * `errors` …), an `Error` carrying that name otherwise.
 *
 * Total: for any input it returns an `Error` or throws a `ProtocolError`.
 * What it returns is safe to print and inspect: `name` and `message` are
 * strings, `stack` is a string or absent, a field named after an inherited
 * method (`toString`, `valueOf`, `constructor` …) is left out,
 * and the cause chain holds at most 16 errors (a longer one is cut after
 * the 16th, as the encoder cuts it).
 *
 * @param fields The decoded map of an error (tag 27001).
 * @returns The error.
 * @throws {ProtocolError} when `name` or `message` is not text, `stack` is
 * present and not text, or the fields cannot be read (a throwing getter or
 * proxy, which the decoder never builds).
 */
export function buildError(fields: Record<string, unknown>): Error {
  try {
    return build(fields);
  } catch (error: unknown) {
    if (error instanceof ProtocolError) throw error;
    throw new ProtocolError(
      "Cannot decode value: an error (tag 27001) whose fields cannot be read",
      { cause: error },
    );
  }
}

function build(fields: Record<string, unknown>): Error {
  if (typeof fields !== "object" || fields === null) {
    throw malformed("an error (tag 27001) that does not wrap a map");
  }
  const { name, message } = fields;
  if (typeof name !== "string" || typeof message !== "string") {
    throw malformed("an error (tag 27001) without a text name and message");
  }
  const hasStack = Object.hasOwn(fields, "stack");
  if (hasStack && typeof fields.stack !== "string") {
    throw malformed("an error (tag 27001) whose stack is not text");
  }
  const options = Object.hasOwn(fields, "cause")
    ? { cause: fields.cause }
    : undefined;
  if (options !== undefined) cutCauseChain(options.cause);
  let error: Error;
  let usedErrors = false;
  if (name === "AggregateError") {
    usedErrors = Array.isArray(fields.errors);
    error = new AggregateError(
      usedErrors ? fields.errors as unknown[] : [],
      message,
      options,
    );
  } else {
    error = new (ERROR_CLASSES.get(name) ?? Error)(message, options);
  }
  if (error.name !== name) {
    Object.defineProperty(error, "name", {
      value: name,
      writable: true,
      enumerable: false,
      configurable: true,
    });
  }
  if (hasStack) {
    Object.defineProperty(error, "stack", {
      value: fields.stack,
      writable: true,
      enumerable: false,
      configurable: true,
    });
  } else {
    delete (error as { stack?: string }).stack;
  }
  for (const key of Object.keys(fields)) {
    if (
      key === "name" || key === "message" || key === "stack" ||
      key === "cause" || (usedErrors && key === "errors") ||
      INHERITED_METHODS.has(key)
    ) {
      continue;
    }
    // Bun gives errors own `line`, `column`…: redefine them in wire order.
    if (Object.hasOwn(error, key)) {
      delete (error as unknown as Record<string, unknown>)[key];
    }
    Object.defineProperty(error, key, {
      value: fields[key],
      writable: true,
      enumerable: true,
      configurable: true,
    });
  }
  return error;
}

/**
 * Cuts the chain below `cause` so that, with the error it becomes the cause
 * of, it holds at most {@linkcode MAX_ERROR_CHAIN} errors. Every error below
 * was cut the same way when it was built, so the walk is short.
 */
function cutCauseChain(cause: unknown): void {
  let current = cause;
  for (let count = 2; current instanceof Error; count++) {
    if (count === MAX_ERROR_CHAIN) {
      delete (current as { cause?: unknown }).cause;
      return;
    }
    current = Object.hasOwn(current, "cause") ? current.cause : undefined;
  }
}

function malformed(detail: string): ProtocolError {
  return new ProtocolError(`Cannot decode value: ${detail}`);
}
