/**
 * `keys webhooks` as an administrator uses it: the HTTPS rule, the secret
 * printed once (by `add` and `rotate-secret`, and by nothing else), `list`,
 * `remove`, and `test` reporting what the receiver answered, through a
 * running server, which alone may reach the network.
 */

import assert from "node:assert/strict";
import { keys, readTree, startServer, tempDir } from "../support/processes.ts";
import { startReceiver } from "../support/webhook_receiver.ts";

const ENV = { DENO_KV_PATH: "./data/keys.db" };

Deno.test("keys webhooks add refuses plain HTTP to another host, naming the https:// URL to use, and stores nothing", async () => {
  using dir = tempDir();
  for (
    const url of [
      "http://hooks.example.com/keys",
      "http://10.0.0.5:8080/keys",
      "http://128.0.0.1/keys",
    ]
  ) {
    const result = await keys(
      dir.path,
      ["webhooks", "add", url, "--json"],
      ENV,
    );
    assert.equal(result.code, 2, url);
    const { error } = JSON.parse(result.stdout);
    assert.equal(error.code, "https_required");
    assert.match(error.message, /except to this host/);
    assert.ok(
      error.message.includes(url.replace("http://", "https://")),
      error.message,
    );
  }
  const listed = await keys(dir.path, ["webhooks", "list", "--json"], ENV);
  assert.deepEqual(JSON.parse(listed.stdout), []);
  for (
    const url of [
      "https://hooks.example.com/keys",
      "http://127.0.0.1:9/keys",
      "http://[::1]:9/keys",
      "http://localhost:9/keys",
    ]
  ) {
    const result = await keys(dir.path, ["webhooks", "add", url], ENV);
    assert.equal(result.code, 0, `${url}: ${result.stderr}`);
  }
});

Deno.test("the signing secret is printed once by add and once by rotate-secret: no other output shows it, and the store keeps only its signing key", async () => {
  using dir = tempDir();
  const add = await keys(dir.path, [
    "webhooks",
    "add",
    "https://hooks.example.com/keys",
    "--events",
    "key.revoked,key.exposed",
  ], ENV);
  assert.equal(add.code, 0, add.stderr);
  const first = add.stdout.trim();
  assert.match(first, /^whsec_[A-Za-z0-9+/]{43}=$/);
  assert.ok(!add.stderr.includes(first));
  const rotated = await keys(
    dir.path,
    ["webhooks", "rotate-secret", "1", "--json"],
    ENV,
  );
  assert.equal(rotated.code, 0, rotated.stderr);
  const value = JSON.parse(rotated.stdout);
  const second = value.secret;
  assert.notEqual(second, first);
  assert.deepEqual(value.events, ["key.revoked", "key.exposed"]);
  assert.ok(!("signingKey" in value));

  const outputs = [add.stderr, rotated.stderr];
  for (
    const args of [
      ["webhooks", "list"],
      ["webhooks", "list", "--json"],
      ["webhooks", "deliveries", "--json"],
      ["audit", "--json"],
      ["export", "-"],
    ]
  ) {
    const result = await keys(dir.path, args, ENV);
    assert.equal(result.code, 0, `${args.join(" ")}: ${result.stderr}`);
    outputs.push(result.stdout, result.stderr);
  }
  const listed = JSON.parse(outputs[4]);
  assert.deepEqual(Object.keys(listed[0]).sort(), [
    "createdAt",
    "events",
    "id",
    "secretSetAt",
    "url",
  ]);
  const store = await readTree(`${dir.path}/data`);
  for (const secret of [first, second]) {
    assert.ok(!outputs.join("\n").includes(secret.slice(6)), "secret shown");
    assert.ok(!store.includes(secret), "the whsec_ secret in the store");
  }

  const removed = await keys(dir.path, ["webhooks", "remove", "1"], ENV);
  assert.equal(removed.code, 0, removed.stderr);
  assert.match(removed.stderr, /Removed webhook endpoint 1/);
  const again = await keys(
    dir.path,
    ["webhooks", "remove", "1", "--json"],
    ENV,
  );
  assert.equal(again.code, 1);
  assert.equal(JSON.parse(again.stdout).error.code, "endpoint_not_found");
  const empty = await keys(dir.path, ["webhooks", "list", "--json"], ENV);
  assert.deepEqual(JSON.parse(empty.stdout), []);
});

Deno.test("keys webhooks test reports what the receiver answered, through a running server granted its host", async () => {
  using dir = tempDir();
  await using receiver = startReceiver();
  const add = await keys(dir.path, ["webhooks", "add", receiver.url], ENV);
  assert.equal(add.code, 0, add.stderr);
  receiver.verifyWith(add.stdout.trim());

  const alone = await keys(dir.path, ["webhooks", "test", "1", "--json"], ENV);
  assert.equal(alone.code, 1);
  assert.equal(JSON.parse(alone.stdout).error.code, "webhook_test_failed");
  assert.match(alone.stderr, /No server is running/);

  const env = { ...ENV, HOST: "127.0.0.1", WEBHOOK_HOSTS: "127.0.0.1" };
  {
    await using server = await startServer(dir.path, env);
    const ok = await keys(dir.path, ["webhooks", "test", "1", "--json"], ENV);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).status, 204);
    assert.match(ok.stderr, /Endpoint 1 answered 204 in \d+ ms/);
    receiver.behave({ status: 500 });
    const failed = await keys(dir.path, ["webhooks", "test", "1"], ENV);
    assert.equal(failed.code, 1);
    assert.match(failed.stderr, /Endpoint 1 answered 500; /);
    assert.equal(receiver.unverified, 0);
    // The test queued while no server ran was sent once one started.
    assert.deepEqual(
      receiver.received.map((r) => [r.type, r.data.endpointId]),
      [["webhook.test", 1], ["webhook.test", 1], ["webhook.test", 1]],
    );
    assert.ok(!server.output().includes(add.stdout.trim().slice(6)));

    // The attempts, newest first, and one sent again under its own id.
    const table = await keys(dir.path, ["webhooks", "deliveries"], ENV);
    assert.equal(table.code, 0, table.stderr);
    assert.match(table.stdout, /^DELIVERY +TYPE +STATE +TRIES +LAST/);
    const rows = table.stdout.trim().split("\n").slice(1);
    assert.equal(rows.length, 3);
    assert.match(rows[0], /webhook\.test +failed +1 +500 /);
    assert.match(rows[1], /webhook\.test +delivered +1 +204 /);
    const failedId = rows[0].split(/ +/)[0];
    receiver.behave({ status: 204 });
    const again = await keys(
      dir.path,
      ["webhooks", "redeliver", failedId, "--json"],
      ENV,
    );
    assert.equal(again.code, 0, again.stderr);
    assert.equal(JSON.parse(again.stdout).state, "pending");
    const id = failedId.slice(0, failedId.lastIndexOf("."));
    await server.waitForOutput(
      new RegExp(`"deliveryId":"${failedId}".*"outcome":"delivered"`),
    );
    assert.deepEqual(
      receiver.received.filter((r) => r.id === id).length,
      2,
      "the same webhook-id again",
    );
    const unknown = await keys(
      dir.path,
      ["webhooks", "redeliver", "msg_nope.1", "--json"],
      ENV,
    );
    assert.equal(unknown.code, 1);
    assert.equal(JSON.parse(unknown.stdout).error.code, "delivery_not_found");
  }
  {
    // A server not granted the receiver's host cannot reach it, and says so.
    await using _server = await startServer(dir.path, {
      ...ENV,
      HOST: "127.0.0.1",
    });
    const refused = await keys(dir.path, ["webhooks", "test", "1"], ENV);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /add its host to WEBHOOK_HOSTS/);
  }
});
