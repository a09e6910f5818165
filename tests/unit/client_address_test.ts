import assert from "node:assert/strict";
import {
  clientAddress,
  lockoutKey,
  networkKey,
} from "../../lib/net/client_address.ts";
import { parseCidr } from "../../lib/net/ip.ts";
import { serveInfo } from "../support/http.ts";

const info = serveInfo;
const request = (xff?: string) =>
  new Request("http://x/", { headers: xff ? { "x-forwarded-for": xff } : {} });

const proxies = (...ranges: string[]) => ({
  trustedProxies: ranges.map((r) => parseCidr(r)!),
});

Deno.test("clientAddress() is the TCP peer and ignores X-Forwarded-For by default", () => {
  assert.equal(
    clientAddress(request("198.51.100.7"), info("10.0.0.1"), proxies()),
    "10.0.0.1",
  );
});

Deno.test("a direct client cannot forge X-Forwarded-For, even when proxies are trusted", () => {
  // The peer is not one of the proxies: its header is the attacker's word.
  for (const forged of ["203.0.113.9", "10.0.0.2, 203.0.113.9", "::1"]) {
    assert.equal(
      clientAddress(
        request(forged),
        info("198.51.100.7"),
        proxies("10.0.0.0/24"),
      ),
      "198.51.100.7",
    );
  }
});

Deno.test("behind trusted proxies the client is the rightmost untrusted X-Forwarded-For entry", () => {
  const chain = "6.6.6.6, 203.0.113.5, 10.0.0.2";
  assert.equal(
    clientAddress(request(chain), info("10.0.0.1"), proxies("10.0.0.0/24")),
    "203.0.113.5",
    "entries left of the client are whatever it sent and are skipped",
  );
  assert.equal(
    clientAddress(request(chain), info("10.0.0.1"), proxies("10.0.0.1/32")),
    "10.0.0.2",
    "a hop that is not a trusted proxy is the client",
  );
});

Deno.test("a trusted proxy with junk or no header leaves the last vouched-for address", () => {
  assert.equal(
    clientAddress(request(), info("10.0.0.1"), proxies("10.0.0.0/8")),
    "10.0.0.1",
  );
  assert.equal(
    clientAddress(
      request("not-an-address, 10.0.0.3"),
      info("10.0.0.1"),
      proxies("10.0.0.0/8"),
    ),
    "10.0.0.3",
  );
  assert.equal(
    clientAddress(request("01.2.3.4"), info("10.0.0.1"), proxies("10.0.0.0/8")),
    "10.0.0.1",
    "octal-looking IPv4 is junk",
  );
});

Deno.test("IPv6 proxies and clients, written any way, are compared as addresses", () => {
  assert.equal(
    clientAddress(
      request("[2001:DB8::0:1]"),
      info("fd00::5"),
      proxies("fd00::/64"),
    ),
    "2001:db8::1",
  );
  assert.equal(
    clientAddress(
      request("198.51.100.4"),
      info("::ffff:127.0.0.1"),
      proxies("127.0.0.1"),
    ),
    "198.51.100.4",
    "a dual-stack socket's mapped IPv4 peer matches an IPv4 range",
  );
});

Deno.test("a dual-stack peer is reported as plain IPv4", () => {
  assert.equal(
    clientAddress(request(), info("::ffff:127.0.0.1"), proxies()),
    "127.0.0.1",
  );
});

Deno.test("lockoutKey() counts IPv6 clients per /64 and IPv4 per address", () => {
  assert.equal(lockoutKey("192.0.2.1"), "192.0.2.1");
  assert.equal(lockoutKey("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
  assert.equal(lockoutKey("2001:db8:1:2::ffff"), "2001:db8:1:2::/64");
  assert.equal(lockoutKey("::1"), "::/64");
  assert.notEqual(lockoutKey("2001:db8:1:3::1"), lockoutKey("2001:db8:1:2::1"));
});

Deno.test("networkKey() groups addresses per /24 and IPv6 per /48", () => {
  assert.equal(networkKey("192.0.2.77"), "192.0.2.0/24");
  assert.equal(networkKey(lockoutKey("2001:db8:1:2::5")), "2001:db8:1::/48");
  assert.equal(networkKey("192.0.2.1"), networkKey("192.0.2.254"));
  assert.notEqual(networkKey("192.0.2.1"), networkKey("192.0.3.1"));
});

Deno.test("X-Forwarded-For entries with a port, as some load balancers write them, name the client", () => {
  const behind = proxies("10.0.0.0/8");
  assert.equal(
    clientAddress(request("9.9.9.9:443"), info("10.0.0.1"), behind),
    "9.9.9.9",
  );
  assert.equal(
    clientAddress(request("[2001:db8::7]:8443"), info("10.0.0.1"), behind),
    "2001:db8::7",
  );
});

Deno.test("a range or address with a leading zero is refused, as some parsers read it as octal", () => {
  for (
    const text of [
      "1.2.3.4/032",
      "1.2.3.0/024",
      "10.0.0.0/08",
      "::1/0128",
      "01.2.3.4",
      "1.2.3.04/32",
    ]
  ) assert.equal(parseCidr(text), null, text);
  assert.ok(parseCidr("1.2.3.4/32"));
  assert.ok(parseCidr("0.0.0.0/0"));
  assert.ok(parseCidr("10.0.0.0/8"));
});

Deno.test("over a Unix socket the proxy's X-Forwarded-For names the client, and without one the client is 'unix'", () => {
  const unix = {
    remoteAddr: { transport: "unix", path: "/run/integration/service.sock" },
    completed: Promise.resolve(),
  } as Deno.ServeHandlerInfo;
  assert.equal(
    clientAddress(request("203.0.113.5"), unix, proxies()),
    "203.0.113.5",
  );
  // Entries left of the proxy's own are the client's word: only the
  // rightmost untrusted one counts, as behind a trusted TCP proxy.
  assert.equal(
    clientAddress(request("6.6.6.6, 203.0.113.5"), unix, proxies()),
    "203.0.113.5",
  );
  assert.equal(
    clientAddress(
      request("6.6.6.6, 203.0.113.5, 10.0.0.2"),
      unix,
      proxies("10.0.0.0/24"),
    ),
    "203.0.113.5",
  );
  assert.equal(clientAddress(request(), unix, proxies()), "unix");
  assert.equal(clientAddress(request("junk"), unix, proxies()), "unix");
});
