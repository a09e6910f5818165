/**
 * A leak report the store could not take: the reporter had its 202 and
 * cannot send it again knowingly, and the log line names no key, so the
 * operator cannot finish it by hand. The report is tried again once the
 * store answers, within a bound on what waits.
 */

import assert from "node:assert/strict";
import { hashApiKey } from "../../lib/auth/api_key.ts";
import type { AuthResult } from "../../lib/auth/key_lookup.ts";
import { LeakReports } from "../../lib/auth/leak_reports.ts";
import { StoreUnavailableError } from "../../lib/store/errors.ts";
import { openKvStore } from "../../lib/store/kv.ts";
import type { KeyStore } from "../../lib/store/types.ts";
import { BackgroundWrites } from "../../lib/util/background.ts";
import { storeKey } from "../support/stored_keys.ts";
import { until } from "../support/wait.ts";

const REPORTER = "203.0.113.9";

/** A store that refuses every call while `down`, and the reports on it. */
async function outage(options: { maxWaitingHashes?: number } = {}) {
  const store = await openKvStore(":memory:");
  const leaked = await storeKey(store, "berlin");
  /** `down`: every call fails; `writesDown`: only the mark and the revocation. */
  const state = { down: false, writesDown: false };
  const refuse = (write: boolean) => {
    if (state.down || (write && state.writesDown)) {
      throw new StoreUnavailableError("store_unavailable", "the store is down");
    }
  };
  const flaky: Pick<KeyStore, "markExposed" | "revoke"> = {
    markExposed: (id, expose) => {
      refuse(true);
      return store.markExposed(id, expose);
    },
    revoke: (id, revoke) => {
      refuse(true);
      return store.revoke(id, revoke);
    },
  };
  const lookUp = async (hash: string): Promise<AuthResult> => {
    refuse(false);
    const { record } = await store.findByHashAt(hash);
    if (record === null) return { ok: false, reason: "unknown" };
    if (record.status !== "valid") return { ok: false, reason: "revoked" };
    return { ok: true, record };
  };
  const lines: Record<string, unknown>[] = [];
  const background = new BackgroundWrites();
  const reports = new LeakReports(flaky, {
    lookUp,
    background,
    log: (fields) => lines.push(fields),
    retryMs: 1,
    maxWaitingHashes: options.maxWaitingHashes,
  });
  return {
    store,
    leaked,
    state,
    reports,
    lines,
    background,
    async [Symbol.asyncDispose]() {
      state.down = false;
      state.writesDown = false;
      await until(
        () => lines.every((line) => !("retryInMs" in line)) || done(lines),
        "the retries to end",
      );
      await background.settled();
      store.close();
    },
  };
}

/** True once the last line says its report's work was done. */
function done(lines: Record<string, unknown>[]): boolean {
  const last = lines.at(-1);
  return last !== undefined && !("error" in last);
}

for (
  const [failing, what] of [
    ["lookUp", "the lookup"],
    ["writes", "the mark and the revocation"],
  ] as const
) {
  Deno.test(`a valid key reported while the store fails ${what} is revoked once it answers again`, async () => {
    await using run = await outage();
    const { leaked, state, reports, lines } = run;
    if (failing === "writes") state.writesDown = true;
    else state.down = true;
    reports.report(["not a key", leaked.key], REPORTER);
    await until(() => lines.length >= 1, "the failed attempt's line");
    assert.equal(lines[0].error, "StoreUnavailableError");
    assert.equal(
      typeof lines[0].retryInMs,
      "number",
      "the failed report is not tried again",
    );
    state.down = false;
    state.writesDown = false;
    await until(() => done(lines), "the report's work once the store is back");
    const { record } = await run.store.findByHashAt(hashApiKey(leaked.key));
    assert.equal(record?.status, "revoked");
    const last = lines.at(-1)!;
    assert.deepEqual(last.revoked, [leaked.record.id]);
    assert.equal(last.client, REPORTER);
    assert.equal(last.values, 2);
    assert.ok(
      !JSON.stringify(lines).includes(hashApiKey(leaked.key).slice(0, 16)),
      "a log line holds the key's hash",
    );
  });
}

Deno.test("reports past the bound on what waits for the store are dropped, and the line says so", async () => {
  await using run = await outage({ maxWaitingHashes: 2 });
  const { leaked, state, reports, lines } = run;
  state.down = true;
  reports.report([leaked.key, "a"], REPORTER);
  await until(() => lines.length >= 1, "the first report's line");
  assert.equal(typeof lines[0].retryInMs, "number");
  reports.report(["b"], "198.51.100.7");
  await until(
    () => lines.some((line) => line.client === "198.51.100.7"),
    "the second report's line",
  );
  const dropped = lines.find((line) => line.client === "198.51.100.7")!;
  assert.equal(dropped.error, "StoreUnavailableError");
  assert.equal(dropped.dropped, true);
  assert.ok(!("retryInMs" in dropped));
  state.down = false;
  await until(() => done(lines), "the first report's work");
  const { record } = await run.store.findByHashAt(hashApiKey(leaked.key));
  assert.equal(record?.status, "revoked");
});
