import assert from "node:assert/strict";
import { clientAddress, lockoutKey } from "../lib/client_address.ts";

const info = (hostname: string) =>
  ({
    remoteAddr: { transport: "tcp", hostname, port: 1 },
    completed: Promise.resolve(),
  }) as Deno.ServeHandlerInfo;
const request = (xff?: string) =>
  new Request("http://x/", { headers: xff ? { "x-forwarded-for": xff } : {} });

Deno.test("clientAddress() is the TCP peer and ignores X-Forwarded-For by default", () => {
  assert.equal(
    clientAddress(request("198.51.100.7"), info("10.0.0.1"), {
      trustProxyHops: 0,
    }),
    "10.0.0.1",
  );
});

Deno.test("clientAddress() takes the Nth X-Forwarded-For entry from the right with TRUST_PROXY_HOPS", () => {
  const forged = "6.6.6.6, 203.0.113.5, 10.0.0.2";
  assert.equal(
    clientAddress(request(forged), info("10.0.0.1"), { trustProxyHops: 1 }),
    "10.0.0.2",
  );
  assert.equal(
    clientAddress(request(forged), info("10.0.0.1"), { trustProxyHops: 2 }),
    "203.0.113.5",
  );
  assert.equal(
    clientAddress(request("2001:db8::1"), info("10.0.0.1"), {
      trustProxyHops: 1,
    }),
    "2001:db8::1",
  );
});

Deno.test("clientAddress() falls back to the peer for a short chain or junk", () => {
  assert.equal(
    clientAddress(request("203.0.113.5"), info("10.0.0.1"), {
      trustProxyHops: 2,
    }),
    "10.0.0.1",
  );
  assert.equal(
    clientAddress(request("not-an-ip"), info("10.0.0.1"), {
      trustProxyHops: 1,
    }),
    "10.0.0.1",
  );
  assert.equal(
    clientAddress(request(), info("10.0.0.1"), { trustProxyHops: 1 }),
    "10.0.0.1",
  );
});

Deno.test("clientAddress() reports IPv4 clients of a dual-stack socket as IPv4", () => {
  assert.equal(
    clientAddress(request(), info("::ffff:127.0.0.1"), { trustProxyHops: 0 }),
    "127.0.0.1",
  );
});

Deno.test("lockoutKey() counts IPv6 clients per /64 and IPv4 per address", () => {
  assert.equal(lockoutKey("192.0.2.1"), "192.0.2.1");
  assert.equal(lockoutKey("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  assert.equal(lockoutKey("2001:db8:1:2::ffff"), "2001:db8:1:2::/64");
  assert.equal(lockoutKey("::1"), "0:0:0:0::/64");
  assert.notEqual(lockoutKey("2001:db8:1:3::1"), lockoutKey("2001:db8:1:2::1"));
});
