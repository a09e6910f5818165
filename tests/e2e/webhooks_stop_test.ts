/**
 * A server stopped as an operator stops it (SIGTERM) while a receiver holds
 * a delivery open: the try is cut off and recorded as `stopped`, due again at
 * once for any server, rather than left claimed (sent again only once the
 * claim runs out, and with no trace of the try in `keys webhooks deliveries`).
 */

import assert from "node:assert/strict";
import { keys, startServer, tempDir } from "../support/processes.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import { until } from "../support/wait.ts";
import { startReceiver } from "../support/webhook_receiver.ts";

type Env = Record<string, string>;

interface Listed {
  state: string;
  dueAt: string;
  attempts: { error: string | null }[];
}

async function run(cwd: string, args: string[], env: Env): Promise<string> {
  const result = await keys(cwd, args, env);
  assert.equal(result.code, 0, `keys ${args.join(" ")}: ${result.stderr}`);
  return result.stdout;
}

async function scenario(store: Env): Promise<void> {
  using dir = tempDir();
  const cwd = dir.path;
  const env: Env = { ...store, HOST: "127.0.0.1", WEBHOOK_HOSTS: "127.0.0.1" };
  await using receiver = startReceiver();
  const added = await run(
    cwd,
    ["webhooks", "add", receiver.url, "--json"],
    env,
  );
  receiver.verifyWith(JSON.parse(added).secret);
  const server = await startServer(cwd, env);
  let code: number;
  try {
    receiver.behave({ hang: true });
    await run(
      cwd,
      ["create", "--name", "held", "--email", "h@example.com"],
      env,
    );
    await until(() => receiver.hanging === 1, "the delivery held open");
  } finally {
    code = await server.stop("SIGTERM");
  }
  const stoppedAt = Date.now();
  assert.equal(code, 0);
  assert.match(
    server.output(),
    /"msg":"webhook_delivery".*"error":"stopped".*"outcome":"retry"/,
  );
  const [delivery]: Listed[] = JSON.parse(
    await run(cwd, ["webhooks", "deliveries", "--json"], env),
  );
  assert.equal(delivery.state, "pending");
  assert.deepEqual(delivery.attempts.map((a) => a.error), ["stopped"]);
  assert.ok(Date.parse(delivery.dueAt) <= stoppedAt, "due again at once");
}

Deno.test("a server stopped with SIGTERM mid-delivery on Deno KV records the try as stopped, due again at once", async () => {
  await scenario({ DENO_KV_PATH: "./data/keys.db" });
});

Deno.test({
  name:
    "a server stopped with SIGTERM mid-delivery on PostgreSQL records the try as stopped, due again at once",
  ignore: NO_DATABASE,
  async fn() {
    await using database = await freshDatabase();
    await scenario({ DATABASE_URL: database.url });
  },
});
