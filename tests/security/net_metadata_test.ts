// A granted name whose DNS answer (the worker's vendor, or a rebinding
// attacker) points at a cloud's metadata or host endpoint outside
// link-local must not get there through the broker: AWS's IPv6 instance
// metadata (fd00:ec2::254, inside fc00::/7), Alibaba Cloud's metadata
// (100.100.100.200, inside the carrier-grade NAT range) and Azure's
// WireServer (168.63.129.16) were classed "private" or "public", so the
// broker connected a granted name to them (169.254.169.254 was refused
// already). The broker must refuse them by class, connecting nowhere.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import dc from "node:diagnostics_channel";
import { connect } from "node:net";
import {
  addressClass,
  netLayout,
} from "../../src/runtime/sandbox/net/targets.ts";
import {
  NET_CONNECTION_CHANNEL,
  type NetConnectionEvent,
  startNetBroker,
} from "../../src/runtime/sandbox/net/broker.ts";
import { until, within } from "../_helpers/wait.ts";

const METADATA = [
  "fd00:ec2::254",
  "fd00:ec2:0:0:0:0:0:254",
  "100.100.100.200",
  "::ffff:100.100.100.200",
  "64:ff9b::6464:64c8",
  "168.63.129.16",
];

describe("net: cloud metadata endpoints outside link-local", () => {
  test("are classed metadata, not private or public", () => {
    for (const address of METADATA) {
      assert.equal(addressClass(address), "metadata", address);
    }
    // Their neighbours stay what they were.
    assert.equal(addressClass("fd00:ec2::253"), "private");
    assert.equal(addressClass("100.100.100.201"), "private");
    assert.equal(addressClass("168.63.129.17"), "public");
  });

  test("a granted name resolving to them is refused, connecting nowhere", async () => {
    const scope = "api.vendor.test:80";
    const layout = netLayout([scope]);
    if ("problem" in layout) throw new Error(layout.problem);
    const events: NetConnectionEvent[] = [];
    const channel = dc.channel(NET_CONNECTION_CHANNEL);
    const onEvent = (message: unknown) => {
      events.push(message as NetConnectionEvent);
    };
    channel.subscribe(onEvent);
    const lookups: string[] = [];
    const broker = startNetBroker({
      module: "net_metadata_test",
      layout,
      lookup: (host) => {
        lookups.push(host);
        return Promise.resolve(
          METADATA.map((address) => ({
            address,
            family: address.includes(":") ? 6 : 4,
          })),
        );
      },
      connectTimeoutMs: 2_000,
    });
    try {
      await broker.listening;
      // What the forwarder does: name the target, then send the request.
      await within(
        new Promise<void>((resolve, reject) => {
          const socket = connect({ path: broker.socket });
          socket.on("error", reject);
          socket.on("close", () => resolve());
          socket.on("data", () => {});
          socket.write(`${scope}\nGET /latest/meta-data/ HTTP/1.0\r\n\r\n`);
        }),
        30_000,
        "the broker's answer",
      );
      await until(() => events.length > 0, 30_000, "the connection's event");
      const [event] = events;
      assert.ok(event);
      assert.deepEqual(lookups, ["api.vendor.test"]);
      assert.equal(event.target, scope);
      assert.equal(event.address, undefined);
      assert.equal(event.bytesIn, 0);
      for (const address of METADATA) {
        assert.ok(
          (event.refused ?? "").includes(`${address} (metadata)`),
          `${address} refused as metadata: ${event.refused}`,
        );
      }
    } finally {
      channel.unsubscribe(onEvent);
      broker.close();
    }
  });
});
