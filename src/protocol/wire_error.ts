/**
 * Errors rebuilt from the wire: the fields of an error (tag 27001) become an
 * instance of the matching standard class, with the name, message, stack,
 * cause and own properties it was sent with.
 *
 * @module
 */

import { ProtocolError } from "../errors.ts";

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
 * Rebuilds an error from the fields it crossed the wire with: a standard
 * class when `name` names one (`TypeError`, `AggregateError` with its
 * `errors` …), an `Error` carrying that name otherwise.
 *
 * @param fields The decoded map of an error (tag 27001).
 * @returns The error.
 * @throws {ProtocolError} when `name` or `message` is not text, or `stack` is
 * present and not text.
 */
export function buildError(fields: Record<string, unknown>): Error {
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
      key === "cause" || (usedErrors && key === "errors")
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

function malformed(detail: string): ProtocolError {
  return new ProtocolError(`Cannot decode value: ${detail}`);
}
