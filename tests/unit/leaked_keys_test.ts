/**
 * POST /api/v1/keys/leaked through the whole handler, in process: what a
 * reporter sees (202, byte for byte the same whatever the values; 400 for a
 * body it cannot take; 429 once the address is locked out) and what the
 * operator sees afterwards (the key marked exposed and revoked, or only
 * marked under `notify`; audit lines and one log line naming the reporter,
 * never a value or a hash).
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { generateApiKey, hashApiKey } from "../../lib/auth/api_key.ts";
import type { LeakedKeyAction } from "../../lib/auth/leak_reports.ts";
import { LockoutTracker } from "../../lib/auth/lockout.ts";
import { readJsonBody } from "../../lib/http/json_body.ts";
import { createHandler } from "../../lib/server/handler.ts";
import { CONNECTION_PATH } from "../../lib/routes/connection.ts";
import {
  LEAKED_PATH,
  MAX_BODY_BYTES,
  MAX_VALUES,
} from "../../lib/routes/leaked.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import type { AuditEntry, KeyStore } from "../../lib/store/types.ts";
import { BackgroundWrites } from "../../lib/util/background.ts";
import { serveInfo, validated } from "../support/http.ts";
import { storeKey } from "../support/stored_keys.ts";

const REPORTER = "203.0.113.9";

async function setup(
  options: {
    action?: LeakedKeyAction;
    maxFailures?: number;
    store?: (store: KeyStore) => KeyStore;
    /** At once unless set: most tests look at what follows the answer. */
    answerAfterMs?: number;
  } = {},
) {
  const raw = await openKvStore(":memory:");
  const store = options.store?.(raw) ?? raw;
  const valid = await storeKey(raw, "berlin");
  const other = await storeKey(raw, "hamburg");
  const revoked = await storeKey(raw, "bremen", { revoked: true });
  const background = new BackgroundWrites();
  const logged: Record<string, unknown>[] = [];
  const handler = createHandler(store, {
    background,
    leakedKeyAction: options.action,
    leakAnswerMs: options.answerAfterMs ?? 0,
    lockout: new LockoutTracker({
      // Room for every report of a test unless it counts toward a lock.
      maxFailures: options.maxFailures ?? 10_000,
      windowSeconds: 60,
      lockSeconds: 300,
    }),
    log: (fields) => logged.push(fields),
  });
  const send = async (
    body: BodyInit | null,
    init: { type?: string; client?: string } = {},
  ) => {
    const request = new Request(`http://localhost${LEAKED_PATH}`, {
      method: "POST",
      headers: { "content-type": init.type ?? "application/json" },
      body,
    });
    return await validated(
      request,
      await handler(request, serveInfo(init.client ?? REPORTER)),
    );
  };
  const report = (values: unknown, client?: string) =>
    send(JSON.stringify(values), { client });
  const connect = async (key: string) =>
    (await handler(
      new Request(`http://localhost${CONNECTION_PATH}`, {
        headers: { "X-API-Key": key },
      }),
      serveInfo("192.0.2.50"),
    )).status;
  return {
    store: raw,
    valid,
    other,
    revoked,
    background,
    logged,
    send,
    report,
    connect,
    audit: async () => await Array.fromAsync(raw.audit()),
    [Symbol.asyncDispose]: async () => {
      await background.settled();
      await raw.close();
    },
  };
}

/** Status, headers and body bytes: everything a reporter can compare. */
async function seen(response: Response) {
  return {
    status: response.status,
    headers: [...response.headers],
    body: await response.text(),
  };
}

/** Nothing of any key, its hash or its hash's start in `text`. */
function assertNoSecret(text: string, keys: string[]): void {
  for (const key of keys) {
    const hash = hashApiKey(key);
    for (const secret of [key, key.slice(4), hash, hash.slice(0, 16)]) {
      assert.ok(!text.includes(secret), `a secret leaked into: ${text}`);
    }
  }
}

Deno.test("a report answers 202 with the same status, headers and body whatever its values were", async () => {
  await using t = await setup({ action: "notify" });
  const reports = [
    [],
    [t.valid.key],
    [t.revoked.key],
    [t.valid.key, t.valid.key, t.other.key],
    ["not a key", "", "isk_", generateApiKey().key],
    Array.from({ length: MAX_VALUES }, () => generateApiKey().key),
    ["\u0000\ud800", "€".repeat(1000)],
  ];
  const answers = [];
  for (const values of reports) {
    answers.push(await seen(await t.report(values)));
  }
  for (const answer of answers) assert.deepEqual(answer, answers[0]);
  assert.equal(answers[0].status, 202);
  assert.deepEqual(JSON.parse(answers[0].body), { status: "accepted" });
});

Deno.test("any list of at most 100 strings gets the one 202, and the keys among them are found", async () => {
  await using t = await setup({ action: "notify" });
  const expected = await seen(await t.report(["first"]));
  await fc.assert(
    fc.asyncProperty(
      fc.array(
        fc.oneof(
          fc.string({ unit: "binary" }),
          fc.constant(t.valid.key),
          fc.constant(t.revoked.key),
        ),
        { maxLength: MAX_VALUES },
      ),
      async (values) => {
        assert.deepEqual(await seen(await t.report(values)), expected);
      },
    ),
    { numRuns: 60 },
  );
  await t.background.settled();
  const record = await t.store.get(t.valid.record.id);
  assert.equal(record?.status, "valid", "notify leaves the key working");
});

Deno.test("a body that is not a JSON list of at most 100 strings gets 400 invalid_body, naming none of its values", async () => {
  await using t = await setup();
  const refused: [string, BodyInit | null, string?][] = [
    ["no body", null],
    ["not JSON", "isk_" + "x".repeat(36)],
    ["JSON but not a list", JSON.stringify({ values: [t.valid.key] })],
    ["a string", JSON.stringify(t.valid.key)],
    ["null", "null"],
    ["a number in the list", JSON.stringify([t.valid.key, 7])],
    ["a list in the list", JSON.stringify([[t.valid.key]])],
    ["101 values", JSON.stringify(Array(MAX_VALUES + 1).fill("a"))],
    ["too large", JSON.stringify(["a".repeat(MAX_BODY_BYTES)])],
    ["not UTF-8", new Uint8Array([0x5b, 0x22, 0xff, 0xfe, 0x22, 0x5d])],
    ["deeply nested", "[".repeat(50_000) + "]".repeat(50_000)],
    [
      "form-encoded",
      `values=${t.valid.key}`,
      "application/x-www-form-urlencoded",
    ],
    ["text", JSON.stringify([t.valid.key]), "text/plain"],
  ];
  for (const [what, body, type] of refused) {
    const answer = await seen(await t.send(body, { type }));
    assert.equal(answer.status, 400, what);
    assert.equal(JSON.parse(answer.body).error, "invalid_body", what);
    assertNoSecret(answer.body, [t.valid.key]);
  }
  await t.background.settled();
  assert.equal((await t.store.get(t.valid.record.id))?.status, "valid");
  assert.ok(!(await t.audit()).some((line) => line.action === "expose"));
});

Deno.test("any JSON that is not a list of at most 100 strings gets the one 400 code, whatever it holds", async () => {
  await using t = await setup();
  const wellFormed = (value: unknown) =>
    Array.isArray(value) && value.length <= MAX_VALUES &&
    value.every((item) => typeof item === "string");
  await fc.assert(
    fc.asyncProperty(
      fc.jsonValue().filter((value) => !wellFormed(value)),
      async (value) => {
        const answer = await t.report(value);
        assert.equal(answer.status, 400);
        assert.equal((await answer.json()).error, "invalid_body");
      },
    ),
    { numRuns: 100 },
  );
});

Deno.test("a body that does not arrive whole in time is refused, not waited for", async () => {
  const never = new Request("http://localhost/", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode("["));
      },
    }),
  });
  const read = await readJsonBody(never, { maxBytes: 1024, timeoutMs: 20 });
  assert.deepEqual(read, {
    ok: false,
    message: "The body did not arrive within 0.02 s",
  });
});

Deno.test("a body streamed past 64 KiB is refused without reading it all", async () => {
  await using t = await setup();
  let pulled = 0;
  const endless = new ReadableStream<Uint8Array>({
    pull(controller) {
      pulled++;
      controller.enqueue(new TextEncoder().encode(`"${"a".repeat(4094)}",`));
    },
  });
  const answer = await t.send(endless);
  assert.equal(answer.status, 400);
  assert.equal((await answer.json()).error, "invalid_body");
  assert.ok(pulled <= MAX_BODY_BYTES / 4096 + 4, `${pulled} chunks read`);
});

Deno.test("every report counts toward the address's lock-out, well-formed or not: past it 429, and the report is not acted on", async () => {
  await using t = await setup({ maxFailures: 3 });
  assert.equal((await t.report(["a"])).status, 202);
  assert.equal((await t.send("not JSON")).status, 400);
  assert.equal((await t.report([])).status, 202);
  const locked = await t.report([t.valid.key]);
  assert.equal(locked.status, 429);
  assert.equal((await locked.json()).error, "locked_out");
  assert.ok(Number(locked.headers.get("retry-after")) > 0);
  // Another address is not locked.
  assert.equal((await t.report([], "198.51.100.7")).status, 202);
  await t.background.settled();
  assert.equal((await t.store.get(t.valid.record.id))?.status, "valid");
  assert.equal(await t.connect(t.valid.key), 200);
  assert.ok(
    t.logged.some((line) => line.msg === "lockout" && line.client === REPORTER),
  );
});

Deno.test("a reported valid key is marked exposed and revoked, audited as a report from the sender's address; the log has one line with counts", async () => {
  await using t = await setup();
  assert.equal(await t.connect(t.valid.key), 200);
  const noise = Array.from({ length: 50 }, () => generateApiKey().key);
  const answer = await t.report([
    ...noise,
    t.valid.key,
    t.valid.key,
    t.revoked.key,
    "hello",
  ]);
  assert.equal(answer.status, 202);
  await t.background.settled();
  assert.equal(await t.connect(t.valid.key), 401);
  const record = await t.store.get(t.valid.record.id);
  assert.equal(record?.status, "revoked");
  assert.equal(record?.exposedFrom, REPORTER);
  assert.equal(record?.revokedReason, `reported as leaked from ${REPORTER}`);
  const lines = (await t.audit()).filter((line) =>
    line.actor === `report from ${REPORTER}`
  );
  assert.deepEqual(
    lines.map(({ action, keyId, detail }) => ({ action, keyId, detail })),
    [
      {
        action: "expose",
        keyId: t.valid.record.id,
        detail: `reported as leaked from ${REPORTER}; rotate it`,
      },
      {
        action: "revoke",
        keyId: t.valid.record.id,
        detail: `reported as leaked from ${REPORTER}`,
      },
    ],
  );
  // Nothing about the other keys, revoked or not.
  assert.equal((await t.store.get(t.other.record.id))?.exposedAt, null);
  const reports = t.logged.filter((line) => line.msg === "leak_report");
  assert.deepEqual(reports, [{
    msg: "leak_report",
    client: REPORTER,
    values: 54,
    validKeys: 1,
    exposed: [t.valid.record.id],
    revoked: [t.valid.record.id],
  }]);
  const everything = JSON.stringify(t.logged) + JSON.stringify(await t.audit());
  assertNoSecret(everything, [t.valid.key, t.revoked.key, ...noise]);
});

Deno.test("a key reported with the white space it was found with is revoked, as the header would have accepted it", async () => {
  await using t = await setup();
  assert.equal(await t.connect(` ${t.valid.key}\t`), 200);
  assert.equal((await t.report([` ${t.valid.key}\r\n`])).status, 202);
  await t.background.settled();
  assert.equal(await t.connect(t.valid.key), 401);
  assert.equal((await t.store.get(t.other.record.id))?.status, "valid");
});

Deno.test("with the answer's own wait, the request after the 202 with the reported key gets 401, and a report without a key takes as long", async () => {
  // A generous wait: the revocation takes milliseconds, however busy the
  // machine; the wait is the same whatever the report held.
  await using t = await setup({ answerAfterMs: 1500 });
  const noise = Array.from({ length: 99 }, () => generateApiKey().key);
  let started = performance.now();
  assert.equal((await t.report(noise)).status, 202);
  const withoutKey = performance.now() - started;
  started = performance.now();
  assert.equal((await t.report([...noise, t.valid.key])).status, 202);
  const withKey = performance.now() - started;
  assert.equal(await t.connect(t.valid.key), 401);
  assert.ok(withoutKey >= 1500 && withKey >= 1500, `${withoutKey} ${withKey}`);
});

Deno.test("with LEAKED_KEY_ACTION=notify a reported key keeps working, marked exposed once however often it is reported", async () => {
  await using t = await setup({ action: "notify" });
  await t.report([t.valid.key]);
  await t.background.settled();
  await t.report([t.valid.key]);
  await t.report([t.valid.key], "198.51.100.7");
  await t.background.settled();
  assert.equal(await t.connect(t.valid.key), 200);
  const record = await t.store.get(t.valid.record.id);
  assert.equal(record?.status, "valid");
  assert.equal(record?.exposedFrom, REPORTER);
  const lines: AuditEntry[] = (await t.audit()).filter((line) =>
    line.keyId === t.valid.record.id && line.action !== "create"
  );
  assert.deepEqual(lines.map((line) => [line.action, line.actor]), [
    ["expose", `report from ${REPORTER}`],
  ]);
});

Deno.test("a key already seen in a URL is still reported as leaked: a line of its own, its first exposure kept", async () => {
  await using t = await setup();
  await t.store.markExposed(t.valid.record.id, {
    actor: "server",
    from: "192.0.2.77",
  });
  await t.report([t.valid.key]);
  await t.background.settled();
  const record = await t.store.get(t.valid.record.id);
  assert.equal(record?.exposedFrom, "192.0.2.77");
  assert.equal(record?.status, "revoked");
  const exposes = (await t.audit()).filter((line) => line.action === "expose");
  assert.deepEqual(exposes.map((line) => line.actor), [
    "server",
    `report from ${REPORTER}`,
  ]);
});

Deno.test("the 202 is sent before any value is looked up or any key changed", async () => {
  let release!: () => void;
  const held = new Promise<void>((resolve) => release = resolve);
  const changes: string[] = [];
  await using t = await setup({
    store: (store) =>
      new Proxy(store, {
        get(target, property, receiver) {
          const value = Reflect.get(target, property, receiver);
          if (property !== "markExposed" && property !== "revoke") {
            return typeof value === "function" ? value.bind(target) : value;
          }
          return async (...args: unknown[]) => {
            changes.push(String(property));
            await held;
            return await value.apply(target, args);
          };
        },
      }),
  });
  const answer = await t.report([t.valid.key]);
  assert.equal(answer.status, 202);
  assert.deepEqual(changes, [], "nothing changed before the answer");
  assert.equal(t.background.size, 1, "the report's work is pending");
  release();
  await t.background.settled();
  assert.deepEqual(changes, ["markExposed", "revoke"]);
});

Deno.test("a store that fails after the 202 is logged by error class, never with a value", async () => {
  let secret = "";
  await using t = await setup({
    store: (store) =>
      new Proxy(store, {
        get(target, property, receiver) {
          if (property === "markExposed") {
            return () => Promise.reject(new RangeError(`failed: ${secret}`));
          }
          const value = Reflect.get(target, property, receiver);
          return typeof value === "function" ? value.bind(target) : value;
        },
      }),
  });
  secret = t.valid.key;
  assert.equal((await t.report([t.valid.key])).status, 202);
  await t.background.settled();
  const line = t.logged.find((fields) => fields.msg === "leak_report");
  assert.equal(line?.error, "RangeError");
  assertNoSecret(JSON.stringify(t.logged), [t.valid.key]);
});
