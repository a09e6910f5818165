/**
 * `keys status` as an operator runs it, on Deno KV and on PostgreSQL: the
 * figures of a known load, two servers live, one killed outright shown
 * lapsed (never live) within a lease, exit 3 once none is live, and no key,
 * hash or e-mail address in anything it prints.
 */

import { VERSION } from "../../lib/util/version.ts";
import assert from "node:assert/strict";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { LEASE_MS } from "../../lib/store/registrations.ts";
import { openStore } from "../../lib/store/open.ts";
import type { StoreLocation } from "../../lib/store/location.ts";
import {
  createKey,
  keys,
  type RunResult,
  type ServerProcess,
  startServer,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE, testStore } from "../support/postgres.ts";
import { until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";

interface Status {
  store: Record<string, unknown>;
  revision: number;
  live: number;
  servers: {
    pid: number;
    host: string;
    release: string | null;
    state: string;
    figures: { at: string; sinceStart: Record<string, number> } | null;
  }[];
  figures: {
    servers: number;
    lastMinute: Record<string, number>;
    sinceStart: Record<string, number>;
    lockedAddresses: number;
  };
}

/** Every status run's output, searched for secrets at the end. */
class Console {
  printed = "";
  constructor(
    readonly cwd: string,
    readonly env: Record<string, string>,
  ) {}

  async run(json: boolean): Promise<RunResult> {
    const result = await keys(
      this.cwd,
      ["status", ...(json ? ["--json"] : [])],
      this.env,
    );
    this.printed += result.stdout + result.stderr;
    return result;
  }

  async json(): Promise<{ code: number; status: Status }> {
    const result = await this.run(true);
    assert.equal(result.stdout.trimEnd().split("\n").length, 1, result.stdout);
    return { code: result.code, status: JSON.parse(result.stdout) };
  }
}

async function get(server: ServerProcess, key: string): Promise<number> {
  const response = await fetch(server.url + ROUTE, {
    headers: { "X-API-Key": key },
  });
  await response.body?.cancel();
  return response.status;
}

/** SIGKILL right after the server renewed, so its registration stands a whole lease more. */
async function killAfterRenewal(
  location: StoreLocation,
  server: ServerProcess,
): Promise<void> {
  const store = await openStore(location);
  try {
    const version = async () =>
      (await store.instances()).find((one) => one.pid === server.process.pid)
        ?.version;
    const before = await version();
    await until(async () => (await version()) !== before, "a renewal", {
      everyMs: 2,
    });
    server.process.kill("SIGKILL");
  } finally {
    await store.close();
  }
  await server.process.status;
}

async function sha256(text: string): Promise<string> {
  const digest = await crypto.subtle.digest(
    "SHA-256",
    new TextEncoder().encode(text),
  );
  return new Uint8Array(digest).toHex();
}

for (const onPostgres of [false, true]) {
  Deno.test({
    name: `${
      onPostgres ? "PostgreSQL" : "Deno KV"
    }: keys status sums a known load, shows a server killed outright as lapsed within a lease and the other live, exits 3 once none is live, and prints no key, hash or e-mail`,
    ignore: onPostgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using database = onPostgres ? await freshDatabase() : null;
      const path = `${dir.path}/store/keys.db`;
      const store = testStore(database, path);
      const location = store.location;
      const env = { ...store.env, LOCKOUT_MAX_FAILURES: "3" };
      const status = new Console(dir.path, env);
      const survivor = await startServer(dir.path, env);
      try {
        // A known load, on the one server: 6 valid; a 3/min key 5 times
        // (3 × 200, 2 × 429); then an unknown key 4 times (3 × 401, then
        // locked out: 429).
        const valid = await createKey(
          dir.path,
          "berlin",
          "ops@example.com",
          env,
        );
        const limited = await keys(dir.path, [
          "create",
          "--name",
          "limited",
          "--email",
          "it@example.com",
          "--rate",
          "3/min",
          "--json",
        ], env);
        assert.equal(limited.code, 0, limited.stderr);
        const limitedKey: string = JSON.parse(limited.stdout).key;
        const unknown = generateApiKey().key;
        const answers: number[] = [];
        for (let i = 0; i < 6; i++) {
          answers.push(await get(survivor, valid.key));
        }
        for (let i = 0; i < 5; i++) {
          answers.push(await get(survivor, limitedKey));
        }
        for (let i = 0; i < 4; i++) answers.push(await get(survivor, unknown));
        assert.deepEqual(answers, [
          ...Array(9).fill(200),
          429,
          429,
          401,
          401,
          401,
          429,
        ]);
        const loaded = Date.now();

        const victim = await startServer(dir.path, env);
        // Both live, and the survivor's figures published after the load
        // ended, by its own clock.
        let seen: Status | undefined;
        await until(async () => {
          const { code, status: now } = await status.json();
          seen = now;
          const at = now.servers.find((one) => one.pid === survivor.process.pid)
            ?.figures?.at;
          return code === 0 && now.live === 2 &&
            at !== undefined && Date.parse(at) > loaded;
        }, "both servers live, the figures of the load published");
        const traffic = {
          requests: 15,
          ok: 9,
          unauthorized: 3,
          lockedOut: 1,
          rateLimited: 2,
          rateLimitedKeys: 1,
        };
        assert.deepEqual(seen!.figures, {
          servers: 2,
          lastMinute: traffic,
          sinceStart: traffic,
          lockedAddresses: 1,
        });
        assert.deepEqual(
          seen!.servers.map((one) => one.release),
          [VERSION, VERSION],
        );
        assert.ok(seen!.servers.every((one) => one.host === Deno.hostname()));
        assert.deepEqual(
          seen!.store,
          database === null ? { kind: "kv", path } : {
            kind: "postgres",
            host: new URL(database.url).hostname,
            port: Number(new URL(database.url).port),
            database: new URL(database.url).pathname.slice(1),
          },
        );

        // Killed right after a renewal: its registration stands a lease
        // longer, which a status begun meanwhile must show lapsed.
        const victimPid = victim.process.pid;
        await killAfterRenewal(location, victim);
        let after: Status | undefined;
        await until(
          async () => {
            const { code, status: now } = await status.json();
            after = now;
            const state = (pid: number) =>
              now.servers.find((one) => one.pid === pid)?.state;
            // Never live once killed.
            assert.notEqual(state(victimPid), "live", JSON.stringify(now));
            return code === 0 && now.live === 1 &&
              state(victimPid) === "lapsed" &&
              state(survivor.process.pid) === "live";
          },
          "one server live and the killed one lapsed",
          {
            giveUpMs: 4 * LEASE_MS,
          },
        );
        // Summed over live servers only.
        assert.equal(after!.figures.servers, 1);
        const human = await status.run(false);
        assert.equal(human.code, 0, human.stderr);
        assert.match(human.stdout, /\blive\b/);
        assert.match(human.stdout, /1 of [12] registered servers? live/);

        survivor.process.kill("SIGKILL");
        await survivor.process.status;
        const none = await status.json();
        assert.equal(none.code, 3);
        assert.equal(none.status.live, 0);
        assert.ok(none.status.servers.every((one) => one.state === "lapsed"));
        const plain = await status.run(false);
        assert.equal(plain.code, 3);
        assert.match(plain.stderr, /No server is live on this store/);
        assert.match(plain.stdout, /0 of \d registered servers? live/);

        // Nothing secret in any of it.
        for (
          const secret of [
            valid.key,
            limitedKey,
            unknown,
            await sha256(valid.key),
            await sha256(limitedKey),
            await sha256(unknown),
            "ops@example.com",
            "it@example.com",
          ]
        ) {
          assert.ok(!status.printed.includes(secret), "a secret was printed");
        }
      } finally {
        await survivor.stop();
      }
    },
  });
}
