/**
 * Deliveries reach only the hosts WEBHOOK_HOSTS grants. The start task also
 * grants the server its own listeners and the store's address, which Deno's
 * permission cannot tell from a receiver's: without this check an endpoint
 * on the server's own port (or the metrics port, or PostgreSQL's) was
 * POSTed to with no WEBHOOK_HOSTS at all.
 */

import assert from "node:assert/strict";
import { grantedHost } from "../../lib/webhooks/endpoint_url.ts";
import { sendOnce } from "../../lib/webhooks/send.ts";
import { newSecret } from "../../lib/webhooks/sign.ts";
import { startReceiver } from "../support/webhook_receiver.ts";

Deno.test("a host alone grants every port, a host and port that port only, as --allow-net does", () => {
  const cases: [string, string[], boolean][] = [
    ["https://hooks.example.com/k", ["hooks.example.com"], true],
    ["https://HOOKS.example.com:8443/k", ["hooks.example.com"], true],
    ["https://hooks.example.com/k", ["hooks.example.com:443"], true],
    ["https://hooks.example.com:8443/k", ["hooks.example.com:443"], false],
    ["http://127.0.0.1:8080/k", ["127.0.0.1:8080"], true],
    ["http://127.0.0.1:8000/k", ["127.0.0.1:8080"], false],
    ["http://127.0.0.1:8000/k", [], false],
    ["http://[::1]:9000/k", ["[::1]"], true],
    ["http://[::1]:9000/k", ["[0:0:0:0:0:0:0:1]:9000"], true],
    ["https://evil.example.com/k", ["example.com"], false],
    ["https://hooks.example.com.evil.test/k", ["hooks.example.com"], false],
  ];
  for (const [url, hosts, expected] of cases) {
    assert.equal(grantedHost(new URL(url), hosts), expected, `${url} ${hosts}`);
  }
});

Deno.test("a delivery to a host WEBHOOK_HOSTS does not grant is not sent, whatever the process may reach", async () => {
  await using receiver = startReceiver();
  const { secret, signingKey } = newSecret();
  receiver.verifyWith(secret);
  const endpoint = {
    id: 1,
    url: receiver.url,
    events: [],
    createdAt: "",
    secretSetAt: "",
    signingKey,
  };
  const event = {
    id: "msg_test",
    type: "webhook.test" as const,
    timestamp: new Date().toISOString(),
    data: {},
  };
  const options = { at: new Date(), timeoutMs: 5_000 };
  const refused = await sendOnce(endpoint, event, { ...options, hosts: [] });
  assert.deepEqual([refused.status, refused.error], [null, "not_permitted"]);
  assert.equal(receiver.received.length, 0);
  const port = new URL(receiver.url).port;
  const sent = await sendOnce(endpoint, event, {
    ...options,
    hosts: [`127.0.0.1:${port}`],
  });
  assert.equal(sent.status, 204);
  assert.equal(receiver.received.length, 1);
});
