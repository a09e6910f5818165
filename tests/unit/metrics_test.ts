/**
 * The in-memory figures (lib/server/figures.ts) and their Prometheus text
 * (lib/server/metrics.ts) without a server: what the API-key step tells
 * them, what the exposition says, the windows of `keys status` on an
 * injected clock. tests/e2e/metrics_test.ts scrapes a real server and
 * hands the text to promtool.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { generateApiKey } from "../../lib/auth/api_key.ts";
import { LockoutTracker } from "../../lib/auth/lockout.ts";
import { createAuthenticator } from "../../lib/http/authenticate.ts";
import { type AuthReason, OUTCOME_OF } from "../../lib/http/telemetry.ts";
import {
  BUSIEST_KEYS,
  Figures,
  LATENCY_BUCKETS,
} from "../../lib/server/figures.ts";
import { exposition, serveMetrics } from "../../lib/server/metrics.ts";
import { counted } from "../../lib/store/counted.ts";
import { openStore } from "../../lib/store/open.ts";
import { countingStore } from "../support/counting_store.ts";

const ROUTE = "/api/v1/integration/connection";
const REASONS = Object.keys(OUTCOME_OF) as AuthReason[];

/** The samples of an exposition by series (name and labels as written). */
function samples(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

/** The clock the figures read, moved by the test. */
function clock(start = Date.UTC(2026, 0, 1)) {
  const time = { now: start };
  return { time, now: () => time.now };
}

Deno.test("the API-key step tells the figures each outcome apart: valid, missing, malformed, unknown, revoked, and the lock-out it starts", async () => {
  await using counting = await countingStore();
  const { key } = await counting.addKey("erp");
  const { key: revoked } = await counting.addKey("old", { revoked: true });
  const figures = new Figures({ routes: [ROUTE] });
  const auth = createAuthenticator(counting.store, {
    lockout: new LockoutTracker({
      maxFailures: 4,
      windowSeconds: 60,
      lockSeconds: 300,
    }),
    counts: figures,
  });
  const check = (apiKey: string | null) =>
    auth.check(
      new Request(`http://localhost${ROUTE}`, {
        headers: apiKey === null ? {} : { "X-API-Key": apiKey },
      }),
      { client: "192.0.2.1", route: ROUTE },
    );
  for (let i = 0; i < 3; i++) await check(key);
  // The fourth failure starts the lock; the fifth request meets it.
  for (const sent of [null, "not-a-key", generateApiKey().key, revoked, key]) {
    await check(sent);
  }
  await check(generateApiKey().key);
  await counting.settled();
  const { outcomes, lockouts, busiestKeys } = figures.read();
  // Every other outcome stays at 0.
  assert.deepEqual(outcomes, {
    ...Object.fromEntries(REASONS.map((reason) => [reason, 0])),
    valid: 4,
    missing: 1,
    malformed: 1,
    unknown: 1,
    revoked: 1,
    locked_out: 1,
  });
  assert.deepEqual(lockouts, { address: 1, network: 0, global: 0 });
  assert.deepEqual(busiestKeys.map((k) => k.requests), [4]);
  assert.equal(figures.snapshot().lockedAddresses, 1);
});

Deno.test("every family of the exposition has one HELP and one TYPE before its samples, and a histogram's buckets only grow up to +Inf, which is its count", () => {
  const figures = new Figures({
    routes: [ROUTE],
    lease: { held: true, subscribe: () => {} },
  });
  for (const seconds of [0.0002, 0.003, 0.003, 0.2, 9]) {
    figures.storeCall("pollInstance", seconds);
  }
  figures.request({ path: ROUTE, status: 200, apiKeyId: 1 });
  figures.request({ path: "/nope", status: 404 });
  figures.outcome("valid", 1);
  const text = exposition(figures.read());
  const declared = new Map<string, string[]>();
  let current = "";
  for (const line of text.trimEnd().split("\n")) {
    const meta = line.match(/^# (HELP|TYPE) (\w+) (.+)$/);
    if (meta) {
      declared.set(meta[2], [...declared.get(meta[2]) ?? [], meta[1]]);
      current = meta[2];
      continue;
    }
    assert.match(
      line,
      /^[a-z_]+(\{[a-z_]+="[^"\\\n]*"(,[a-z_]+="[^"\\\n]*")*\})? \d+(\.\d+)?(e-?\d+)?$/,
    );
    assert.ok(line.startsWith(current), `${line} is not under ${current}`);
  }
  for (const [name, seen] of declared) {
    assert.deepEqual(seen, ["HELP", "TYPE"], name);
    assert.match(name, /^integration_[a-z_]+$/);
  }
  const values = samples(text);
  const bucket = (le: string | number) =>
    values.get(
      `integration_store_call_duration_seconds_bucket{method="pollInstance",le="${le}"}`,
    );
  const cumulative = LATENCY_BUCKETS.map((le) => bucket(le)!);
  assert.deepEqual(cumulative, [1, 1, 3, 3, 3, 3, 3, 4, 4, 4]);
  assert.equal(bucket("+Inf"), 5);
  assert.equal(
    values.get(
      'integration_store_call_duration_seconds_count{method="pollInstance"}',
    ),
    5,
  );
  assert.equal(
    values.get(
      `integration_requests_total{route="${ROUTE}",status="200"}`,
    ),
    1,
  );
  assert.equal(
    values.get('integration_requests_total{route="unrouted",status="404"}'),
    1,
  );
  assert.equal(values.get("integration_lease_held"), 1);
});

Deno.test("any mix of requests and outcomes: each counter equals what was sent, and only the busiest keys, by id, have a label", () => {
  const event = fc.oneof(
    fc.record({
      kind: fc.constant("request" as const),
      routed: fc.boolean(),
      status: fc.constantFrom(200, 400, 401, 404, 429, 503),
    }),
    fc.record({
      kind: fc.constant("outcome" as const),
      reason: fc.constantFrom(...REASONS),
      keyId: fc.integer({ min: 1, max: 60 }),
    }),
  );
  fc.assert(
    fc.property(fc.array(event, { maxLength: 400 }), (events) => {
      const figures = new Figures({ routes: [ROUTE] });
      const requests = new Map<string, number>();
      const outcomes = new Map<string, number>();
      const perKey = new Map<number, number>();
      for (const e of events) {
        if (e.kind === "request") {
          const path = e.routed ? ROUTE : "/api/v1/isk_typo";
          figures.request({ path, status: e.status });
          const series = `{route="${
            e.routed ? ROUTE : "unrouted"
          }",status="${e.status}"}`;
          requests.set(series, (requests.get(series) ?? 0) + 1);
        } else {
          const keyed = e.reason === "valid" || e.reason === "rate_limited";
          figures.outcome(e.reason, keyed ? e.keyId : undefined);
          outcomes.set(e.reason, (outcomes.get(e.reason) ?? 0) + 1);
          if (keyed) perKey.set(e.keyId, (perKey.get(e.keyId) ?? 0) + 1);
        }
      }
      const values = samples(exposition(figures.read()));
      for (const [series, n] of requests) {
        assert.equal(values.get(`integration_requests_total${series}`), n);
      }
      for (const reason of REASONS) {
        assert.equal(
          values.get(`integration_auth_outcomes_total{outcome="${reason}"}`),
          outcomes.get(reason) ?? 0,
        );
      }
      const labelled = [...values.keys()].filter((s) =>
        s.startsWith("integration_key_requests_total")
      );
      assert.equal(labelled.length, Math.min(perKey.size, BUSIEST_KEYS));
      const least = Math.min(
        ...labelled.map((s) => Number(s.match(/key_id="(\d+)"/)![1]))
          .map((id) => perKey.get(id)!),
      );
      // None left out was busier than one shown.
      const shown = new Set(labelled.map((s) => s.match(/"(\d+)"/)![1]));
      for (const [id, n] of perKey) {
        if (!shown.has(String(id))) assert.ok(n <= least, `key ${id}`);
      }
      for (const series of values.keys()) {
        for (const [, value] of series.matchAll(/="([^"]*)"/g)) {
          assert.match(
            value,
            /^(\/api\/v1\/integration\/connection|unrouted|\d+|[a-z_]+|[\d.]+|\+Inf)$/,
          );
        }
      }
    }),
  );
});

Deno.test("keys status's figures: the last minute forgets what is older, since start keeps it, and a lock-out counts as an address locked for LOCKOUT_SECONDS", () => {
  const { time, now } = clock();
  const figures = new Figures({ routes: [ROUTE], lockSeconds: 120, now });
  /** As the lease renews: a read every 1.5 s. */
  const advance = (ms: number) => {
    for (let gone = 0; gone < ms; gone += 1500) {
      time.now += 1500;
      figures.snapshot();
    }
  };
  const answer = (status: number, reason?: AuthReason, keyId?: number) => {
    figures.request({ path: ROUTE, status, apiKeyId: keyId });
    if (reason !== undefined) figures.outcome(reason, keyId);
  };
  answer(200, "valid", 7);
  answer(401, "unknown");
  answer(429, "rate_limited", 8);
  figures.lockout("address");
  advance(45_000);
  answer(200, "valid", 7);
  answer(429, "locked_out");
  let shown = figures.snapshot();
  assert.deepEqual(shown.lastMinute, {
    requests: 5,
    ok: 2,
    unauthorized: 1,
    lockedOut: 1,
    rateLimited: 1,
    rateLimitedKeys: 1,
  });
  assert.equal(shown.lockedAddresses, 1);
  advance(30_000);
  shown = figures.snapshot();
  assert.deepEqual(shown.lastMinute, {
    requests: 2,
    ok: 1,
    unauthorized: 0,
    lockedOut: 1,
    rateLimited: 0,
    rateLimitedKeys: 0,
  });
  assert.deepEqual(shown.sinceStart, {
    requests: 5,
    ok: 2,
    unauthorized: 1,
    lockedOut: 1,
    rateLimited: 1,
    rateLimitedKeys: 1,
  });
  assert.equal(shown.lockedAddresses, 1);
  advance(60_000);
  shown = figures.snapshot();
  assert.equal(shown.lastMinute.requests, 0);
  assert.equal(shown.lockedAddresses, 0);
  assert.equal(shown.at, new Date(time.now).toISOString());
});

Deno.test("a timed store times each call to its answer, failed ones too, and so does every store made from it", async () => {
  const timings: string[] = [];
  const opened = counted(
    await openStore({ kind: "kv", path: ":memory:" }),
    { timed: (method, seconds) => seconds >= 0 && timings.push(method) },
  );
  try {
    const made = opened.store.with({});
    await opened.store.revision();
    await made.get(1);
    await assert.rejects(made.revoke(999, { actor: "test" }));
    assert.deepEqual(timings, ["revision", "get", "revoke"]);
    assert.equal(opened.counts().revoke, 1);
  } finally {
    await opened.store.close();
  }
});

Deno.test("the metrics listener answers HEAD /metrics as GET without a body, 405 with Allow for another method, 404 elsewhere", async () => {
  const figures = new Figures({ routes: [ROUTE] });
  const server = serveMetrics(() => figures.read(), {
    hostname: "127.0.0.1",
    port: 0,
  });
  try {
    const { port } = server.addr as Deno.NetAddr;
    const url = `http://127.0.0.1:${port}/metrics`;
    const get = await fetch(url);
    const text = await get.text();
    assert.equal(get.status, 200);
    assert.ok(text.includes("# TYPE"), "GET has the exposition");
    const head = await fetch(url, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(
      head.headers.get("content-type"),
      get.headers.get("content-type"),
    );
    assert.equal(await head.text(), "");
    const post = await fetch(url, { method: "POST", body: "x" });
    await post.body?.cancel();
    assert.equal(post.status, 405);
    assert.equal(post.headers.get("allow"), "GET, HEAD");
    const elsewhere = await fetch(`http://127.0.0.1:${port}/metrics/x`);
    await elsewhere.body?.cancel();
    assert.equal(elsewhere.status, 404);
  } finally {
    await server.shutdown();
  }
});
