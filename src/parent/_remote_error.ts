/**
 * Turning what a worker sent as an error into a `RemoteError`. Private to
 * src/parent.
 *
 * @module
 */

import { RemoteError } from "../errors.ts";

/**
 * Rebuilds a `RemoteError` from what a worker sent as an error.
 *
 * @param value The decoded error value.
 * @param where The module, op and pid.
 * @returns The remote error.
 */
export function toRemoteError(
  value: unknown,
  where: { module: string; op: string; pid: number },
): RemoteError {
  if (value instanceof Error) {
    const properties: Record<string, unknown> = {};
    for (const key of Object.keys(value)) {
      if (key === "name" || key === "message" || key === "stack") continue;
      if (key === "cause") continue;
      properties[key] = (value as unknown as Record<string, unknown>)[key];
    }
    return new RemoteError({
      ...where,
      remoteName: value.name,
      remoteMessage: value.message,
      remoteStack: value.stack,
      properties,
      ...("cause" in value ? { cause: value.cause } : {}),
    });
  }
  return new RemoteError({
    ...where,
    remoteName: "Error",
    remoteMessage: typeof value === "string"
      ? value
      : `the handler threw a non-error value: ${String(value)}`,
    properties: { value },
  });
}
