/**
 * The routing netlink request that gives a sandbox's loopback interface a
 * granted address outside loopback (`RTM_NEWADDR`, `10.0.0.5/32` or an
 * IPv6 `/128`), as the runtime confine step sends it; the native step
 * builds the same bytes in C (`add_to_loopback` in native/relay.c). No
 * imports: the runtime step loads it on every forwarded start.
 *
 * @module
 */

const RTM_NEWADDR = 20;
const NLM_F_REQUEST = 1;
const NLM_F_ACK = 4;
const NLM_F_EXCL = 0x200;
const NLM_F_CREATE = 0x400;
const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const IFA_F_NODAD = 0x02;
const RT_SCOPE_HOST = 254;
/** A new network namespace makes its loopback interface first. */
const LOOPBACK_INDEX = 1;

/** The kernel's answer type to a request with `NLM_F_ACK`. */
export const NLMSG_ERROR = 2;

/**
 * The request's bytes (host byte order, as netlink wants them).
 *
 * @param address The address's bytes: 4 (IPv4) or 16 (IPv6).
 * @returns The message.
 *
 * @example
 * ```ts
 * import { loopbackAddressRequest } from "./loopback_request.ts";
 * import assert from "node:assert/strict";
 *
 * const request = loopbackAddressRequest(new Uint8Array([10, 0, 0, 5]));
 * assert.equal(request.byteLength, 40);
 * assert.deepEqual([...request.subarray(16, 20)], [2, 32, 2, 254]);
 * ```
 */
export function loopbackAddressRequest(address: Uint8Array): Uint8Array {
  const bytes = address.byteLength;
  if (bytes !== 4 && bytes !== 16) {
    throw new RangeError(`an address is 4 or 16 bytes, not ${bytes}`);
  }
  const length = 24 + 2 * (4 + bytes);
  const request = new Uint8Array(length);
  const view = new DataView(request.buffer);
  const little = true; // netlink is in host order; both targets are little-endian
  view.setUint32(0, length, little);
  view.setUint16(4, RTM_NEWADDR, little);
  view.setUint16(
    6,
    NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE,
    little,
  );
  view.setUint32(8, 1, little);
  // struct ifaddrmsg: family, prefix length, flags, scope, interface index.
  request[16] = bytes === 4 ? 2 : 10;
  request[17] = bytes * 8;
  request[18] = IFA_F_NODAD; // IPv6: usable at once, no duplicate detection
  request[19] = RT_SCOPE_HOST;
  view.setUint32(20, LOOPBACK_INDEX, little);
  let at = 24;
  for (const type of [IFA_LOCAL, IFA_ADDRESS]) {
    view.setUint16(at, 4 + bytes, little);
    view.setUint16(at + 2, type, little);
    request.set(address, at + 4);
    at += 4 + bytes;
  }
  return request;
}
