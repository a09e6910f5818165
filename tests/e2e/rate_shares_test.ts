/**
 * A key's whole rate limit for a client whose requests all land on one
 * server, with several servers on one store: the others lend their shares
 * (lib/auth/share_ledger.ts), and the installation still accepts no more
 * than the limit. On Deno KV and PostgreSQL, with real processes; and with
 * REUSE_PORT=1, where the kernel pins a keep-alive connection to one
 * process; with the lender frozen (SIGSTOP) and thawed, and the borrower
 * killed (SIGKILL); and a request past the limit refused as soon as the
 * other server answers it has no room.
 */

import assert from "node:assert/strict";
import {
  createKey,
  freePort,
  keys,
  startPeers,
  tempDir,
} from "../support/processes.ts";
import { freshDatabase, NO_DATABASE } from "../support/postgres.ts";
import { shareWaitMs } from "../../lib/auth/share_ledger.ts";
import { until } from "../support/wait.ts";

const ROUTE = "/api/v1/integration/connection";
const LIMIT = 10;
/**
 * What a busy machine may add to a wait the server times itself: the
 * request's way in and out, and timers running late under load.
 */
const SLACK_MS = 2000;

const STORES = [
  { label: "KV", postgres: false, pollMs: 100 },
  { label: "PostgreSQL", postgres: true, pollMs: 500 },
] as const;

/** The store's environment: a KV file in the folder, or a fresh database. */
async function storeEnv(
  dir: string,
  postgres: boolean,
): Promise<{ env: Record<string, string> } & AsyncDisposable> {
  if (!postgres) {
    return {
      env: { DENO_KV_PATH: `${dir}/keys.db` },
      async [Symbol.asyncDispose]() {},
    };
  }
  const database = await freshDatabase();
  return {
    env: { DATABASE_URL: database.url },
    [Symbol.asyncDispose]: () => database[Symbol.asyncDispose](),
  };
}

/** A key at LIMIT a minute. */
async function limitedKey(dir: string, env: Record<string, string>) {
  const made = await createKey(dir, "berlin-erp", undefined, env);
  const set = await keys(dir, [
    "update",
    String(made.id),
    "--rate",
    `${LIMIT}/min`,
  ], env);
  assert.equal(set.code, 0, set.stderr);
  return made.key;
}

/** One request; its status, how long its answer took and who answered. */
async function call(
  url: string,
  key: string,
  client?: Deno.HttpClient,
): Promise<{ status: number; ms: number; by: string; retryAfter: number }> {
  const sent = performance.now();
  const response = await fetch(url + ROUTE, {
    headers: { "X-API-Key": key },
    client,
  });
  await response.body?.cancel();
  const policy = response.headers.get("ratelimit-policy");
  assert.equal(policy, `"key";q=${LIMIT};w=60`);
  return {
    status: response.status,
    ms: performance.now() - sent,
    by: (response.headers.get("x-request-id") ?? "").split("-")[0],
    retryAfter: Number(response.headers.get("retry-after") ?? 0),
  };
}

/** Sends `count` requests one after another, as one client does. */
async function inTurn(count: number, send: () => ReturnType<typeof call>) {
  const answers = [];
  for (let i = 0; i < count; i++) answers.push(await send());
  return answers;
}

function statuses(answers: { status: number }[]): string {
  return answers.map((a) => a.status).join(",");
}

for (const { label, postgres, pollMs } of STORES) {
  const waitMs = shareWaitMs(pollMs);

  Deno.test({
    name:
      `${label}: with two servers, a client calling one of them gets the key's whole limit of ${LIMIT} a minute, and then neither server accepts another`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await storeEnv(dir.path, postgres);
      const key = await limitedKey(dir.path, store.env);
      const [one, other] = await startPeers(dir.path, store.env, 2);
      try {
        const answers = await inTurn(LIMIT, () => call(one.url, key));
        assert.equal(
          statuses(answers),
          Array(LIMIT).fill(200).join(","),
          "every request within the limit is accepted",
        );
        const slowest = Math.max(...answers.map((a) => a.ms));
        const past = await call(one.url, key);
        const elsewhere = await call(other.url, key);
        console.log(
          `${label}: ${LIMIT} × 200 on one server, the slowest (a borrow) in ${
            slowest.toFixed(0)
          } ms; past the limit 429 in ${past.ms.toFixed(0)} ms there and ${
            elsewhere.ms.toFixed(0)
          } ms on the other (bound ${waitMs} ms)`,
        );
        assert.equal(past.status, 429);
        assert.equal(elsewhere.status, 429, "ten in all across both servers");
        assert.ok(past.ms <= waitMs + SLACK_MS, `${past.ms}`);
      } finally {
        await Promise.all([one.stop(), other.stop()]);
      }
    },
  });

  Deno.test({
    name:
      `${label}: with the key used up on both servers, a request past the limit gets 429 once the other server answers it has no room, not after the wait, and Retry-After says when the first request leaves the window`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await storeEnv(dir.path, postgres);
      const key = await limitedKey(dir.path, store.env);
      const [one, other] = await startPeers(dir.path, store.env, 2);
      try {
        const first = performance.now();
        const theirs = await inTurn(LIMIT / 2, () => call(other.url, key));
        // A gap, not a synchronisation: this server's own requests leave
        // the window 3 s after the other's, so a Retry-After counted from
        // its own (60) is told from one counted from the other's (57).
        await new Promise((resolve) => setTimeout(resolve, 3000));
        const mine = await inTurn(LIMIT / 2, () => call(one.url, key));
        assert.equal(
          statuses([...theirs, ...mine]),
          Array(LIMIT).fill(200).join(","),
        );
        const past = await call(one.url, key);
        const again = await call(one.url, key);
        console.log(
          `${label}: used up on both servers, 429 after ${
            past.ms.toFixed(0)
          } ms, the next after ${
            again.ms.toFixed(0)
          } ms (wait bound ${waitMs} ms); Retry-After ${past.retryAfter} s`,
        );
        assert.equal(past.status, 429);
        assert.equal(again.status, 429);
        assert.ok(past.ms < waitMs, `held ${past.ms} ms`);
        // The other's first leaves the window 60 s after it was sent, or
        // sooner by as long as the answer took to be read (never later).
        const frees = 60 - (performance.now() - first) / 1000;
        assert.ok(past.retryAfter >= 1 && past.retryAfter <= 60);
        // Early by the answer's way through the store at most, not the
        // whole window this server's own share would say.
        assert.ok(past.retryAfter >= frees - 5, `${past.retryAfter}`);
        assert.ok(
          past.retryAfter <= Math.ceil(frees) + 1,
          `Retry-After ${past.retryAfter}, the first frees in ${frees} s`,
        );
      } finally {
        await Promise.all([one.stop(), other.stop()]);
      }
    },
  });

  Deno.test({
    name:
      `${label}: a lender frozen with SIGSTOP holding half the limit: the client's requests 6 to 10 all get 200 (held until its registration lapses), the 11th 429; thawed, it accepts none of the key in that window`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await storeEnv(dir.path, postgres);
      const key = await limitedKey(dir.path, store.env);
      const [live, frozen] = await startPeers(dir.path, store.env, 2);
      const pid = frozen.process.pid;
      try {
        Deno.kill(pid, "SIGSTOP");
        await until(() => processState(pid) === "T", `pid ${pid} to stop`);
        const answers = await inTurn(LIMIT, () => call(live.url, key));
        assert.equal(statuses(answers), Array(LIMIT).fill(200).join(","));
        const held = answers[LIMIT / 2].ms;
        const past = await call(live.url, key);
        console.log(
          `${label}: frozen lender, the 6th answered 200 after ${
            held.toFixed(0)
          } ms (bound ${waitMs} ms), the 11th 429 after ${
            past.ms.toFixed(0)
          } ms`,
        );
        assert.ok(held <= waitMs + SLACK_MS, `${held}`);
        assert.equal(past.status, 429);
        // Thawed: its registration was removed, it registers afresh.
        Deno.kill(pid, "SIGCONT");
        await frozen.waitForOutput(/"msg":"lease_held"/);
        const thawed = await inTurn(3, () => call(frozen.url, key));
        assert.equal(
          statuses(thawed),
          "429,429,429",
          "no window over the limit",
        );
        assert.equal((await call(live.url, key)).status, 429);
      } finally {
        Deno.kill(pid, "SIGCONT");
        await Promise.all([live.stop(), frozen.stop()]);
      }
    },
  });

  Deno.test({
    name:
      `${label}: a borrower killed with SIGKILL after borrowing the other's share: its client, moving to the lender, gets 200 for the rest of its limit (held until the dead one lapses)`,
    ignore: postgres && NO_DATABASE,
    async fn() {
      using dir = tempDir();
      await using store = await storeEnv(dir.path, postgres);
      const key = await limitedKey(dir.path, store.env);
      const [lender, borrower] = await startPeers(dir.path, store.env, 2);
      try {
        const before = await inTurn(6, () => call(borrower.url, key));
        assert.equal(statuses(before), "200,200,200,200,200,200");
        await borrower.stop("SIGKILL");
        const after = await inTurn(LIMIT - 6, () => call(lender.url, key));
        assert.equal(
          statuses(after),
          "200,200,200,200",
          "the rest of its limit",
        );
        // The dead one's six still lie in the window, uncounted here: the
        // documented bound of a borrower stopped mid-window (at most 2L).
        let more = 0;
        while (more < LIMIT && (await call(lender.url, key)).status === 200) {
          more++;
        }
        console.log(
          `${label}: killed borrower, the lender's first answered 200 after ${
            after[0].ms.toFixed(0)
          } ms (bound ${waitMs} ms); ${more} more accepted in that window`,
        );
        assert.ok(after[0].ms <= waitMs + SLACK_MS, `${after[0].ms}`);
        assert.ok(6 + LIMIT - 6 + more <= 2 * LIMIT);
      } finally {
        await Promise.all([lender.stop(), borrower.stop()]);
      }
    },
  });
}

Deno.test("REUSE_PORT=1: one keep-alive connection, pinned to one of two servers on one port, gets the key's whole limit, then 429", async () => {
  using dir = tempDir();
  const env = { DENO_KV_PATH: `${dir.path}/keys.db` };
  const key = await limitedKey(dir.path, env);
  const [first, second] = await startPeers(dir.path, {
    ...env,
    PORT: String(freePort()),
    REUSE_PORT: "1",
  }, 2);
  using client = Deno.createHttpClient({});
  try {
    const answers = await inTurn(LIMIT + 1, () => call(first.url, key, client));
    assert.equal(new Set(answers.map((a) => a.by)).size, 1, "one process");
    assert.equal(
      statuses(answers),
      [...Array(LIMIT).fill(200), 429].join(","),
    );
  } finally {
    await Promise.all([first.stop(), second.stop()]);
  }
});

/** The state letter of a process in /proc (T: stopped by a signal). */
function processState(pid: number): string {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
}
