/**
 * Where keys are used from, off the request path: the bounded network list
 * under random address sequences, and the store writes a flood costs.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { lockoutKey } from "../../lib/net/client_address.ts";
import {
  mergeNetworks,
  NETWORKS_KEPT,
  REFUSED_KEPT,
} from "../../lib/store/usage_lists.ts";
import type { NetworkUse } from "../../lib/store/types.ts";
import { LastUsedRecorder } from "../../lib/usage/last_used.ts";
import { NETWORK_NOTES_MAX, UsageRecorder } from "../../lib/usage/networks.ts";
import { countingStore } from "../support/counting_store.ts";

Deno.test("the networks list stays bounded, distinct and first-seen ordered, with first seen never after last seen, over random uses", () => {
  const use = fc.record({
    network: fc.constantFrom(
      ...Array.from({ length: 9 }, (_, i) => `10.0.${i}.0/24`),
    ),
    ms: fc.integer({ min: 0, max: 10_000_000 }),
  });
  fc.assert(
    fc.property(
      fc.array(fc.array(use, { maxLength: 20 }), { maxLength: 12 }),
      (batches) => {
        let list: NetworkUse[] = [];
        for (const batch of batches) {
          const before = new Set(list.map((n) => n.network));
          const merged = mergeNetworks(
            list,
            batch.map((u) => ({ network: u.network, at: new Date(u.ms) })),
          );
          list = merged.networks;
          const names = list.map((n) => n.network);
          assert.ok(list.length <= NETWORKS_KEPT);
          assert.equal(new Set(names).size, names.length);
          for (const n of list) assert.ok(n.firstSeenAt <= n.lastSeenAt);
          for (let i = 1; i < list.length; i++) {
            assert.ok(list[i - 1].firstSeenAt <= list[i].firstSeenAt);
          }
          // Every network new to the list is reported once, kept or not.
          const fresh = new Set(
            batch.map((u) => u.network).filter((n) => !before.has(n)),
          );
          assert.deepEqual(new Set(merged.added), fresh);
          assert.equal(merged.added.length, fresh.size);
          const distinct = new Set([...before, ...batch.map((u) => u.network)]);
          assert.equal(list.length, Math.min(NETWORKS_KEPT, distinct.size));
        }
      },
    ),
  );
});

Deno.test("a flood of refused uses from 2000 addresses costs one store write per flush and leaves ten stored", async () => {
  await using counting = await countingStore();
  const { record } = await counting.addKey("restricted");
  const recorder = new UsageRecorder(counting.store, { flushMs: 60_000 });
  counting.reset();
  const now = Date.now();
  for (let i = 0; i < 2000; i++) {
    recorder.refused(record.id, `198.51.${i >> 8}.${i & 255}`, now + i);
  }
  assert.equal(counting.calls(), 0, "nothing is written on the request path");
  await recorder.flush();
  for (let i = 0; i < 2000; i++) {
    recorder.refused(record.id, `203.0.${i >> 8}.${i & 255}`, now + 5000 + i);
  }
  await recorder.close();
  await counting.settled();
  assert.equal(counting.calls("recordRefusedUses"), 2);
  const refused = (await counting.store.get(record.id))!.refusedUses;
  assert.equal(refused.length, REFUSED_KEPT);
  assert.equal(refused.at(-1)!.address, "203.0.7.207");
});

Deno.test("uses from one network are noted once a minute, and only a new network is logged, once", async () => {
  await using counting = await countingStore();
  const { record } = await counting.addKey("busy");
  const lines: Record<string, unknown>[] = [];
  const recorder = new UsageRecorder(counting.store, {
    flushMs: 60_000,
    log: (fields) => lines.push(fields),
  });
  const now = Date.now();
  for (let i = 0; i < 1000; i++) {
    recorder.used(record.id, lockoutKey(`192.0.2.${i % 200}`), now + i);
  }
  recorder.used(record.id, lockoutKey("2001:db8:1:2::7"), now);
  await recorder.flush();
  for (let i = 0; i < 100; i++) {
    recorder.used(record.id, lockoutKey("192.0.2.9"), now + 61_000 + i);
  }
  await recorder.close();
  await counting.settled();
  assert.deepEqual(lines, [
    { msg: "key_new_network", apiKeyId: record.id, network: "192.0.2.0/24" },
    { msg: "key_new_network", apiKeyId: record.id, network: "2001:db8:1::/48" },
  ]);
  assert.equal(counting.calls("recordNetworkUses"), 2);
  const networks = (await counting.store.get(record.id))!.networks;
  assert.deepEqual(networks.map((n) => n.network), [
    "192.0.2.0/24",
    "2001:db8:1::/48",
  ]);
  assert.equal(networks[0].lastSeenAt, new Date(now + 61_000).toISOString());
  const audited = [];
  for await (const e of counting.store.audit({ keyId: record.id })) {
    if (e.action === "network") audited.push(e.detail);
  }
  assert.deepEqual(audited, [
    "first used from 192.0.2.0/24",
    "first used from 2001:db8:1::/48",
  ]);
});

Deno.test("a background write that fails is logged with its error's code, for last use and usage alike, and names no key", async () => {
  await using counting = await countingStore();
  const stored = await counting.addKey("noted");
  const lines: Record<string, unknown>[] = [];
  const log = (fields: Record<string, unknown>) => lines.push(fields);
  const lastUsed = new LastUsedRecorder(counting.store, {
    flushMs: 60_000,
    log,
  });
  const usage = new UsageRecorder(counting.store, { flushMs: 60_000, log });
  counting.failing = true;
  lastUsed.used(stored.record.id, Date.now());
  usage.refused(stored.record.id, "198.51.100.7", Date.now());
  await lastUsed.close();
  await usage.close();
  assert.deepEqual(lines, [
    { msg: "store_write_failed", what: "last_used", code: "store_unavailable" },
    { msg: "store_write_failed", what: "usage", code: "store_unavailable" },
  ]);
  const text = JSON.stringify(lines);
  assert.ok(!text.includes(stored.key) && !text.includes(stored.record.hash));
});

Deno.test("a key used from 1,100 new networks within a minute is noted from 50 and the rest counted, and another key's new network in the same flush is still logged and audited", async () => {
  await using counting = await countingStore();
  const { record: flooded } = await counting.addKey("flooded");
  const { record: other } = await counting.addKey("other");
  const lines: Record<string, unknown>[] = [];
  const recorder = new UsageRecorder(counting.store, {
    flushMs: 60_000,
    log: (fields) => lines.push(fields),
  });
  const now = Date.now();
  for (let i = 0; i < 1100; i++) {
    recorder.used(flooded.id, lockoutKey(`10.${i >> 8}.${i & 255}.7`), now);
  }
  recorder.used(other.id, lockoutKey("192.0.2.7"), now);
  await recorder.close();
  await counting.settled();
  const noted = lines.filter((l) => l.msg === "key_new_network");
  assert.equal(noted.filter((l) => l.apiKeyId === flooded.id).length, 50);
  assert.deepEqual(noted.filter((l) => l.apiKeyId === other.id), [
    { msg: "key_new_network", apiKeyId: other.id, network: "192.0.2.0/24" },
  ]);
  assert.deepEqual(lines.filter((l) => l.msg === "network_notes_dropped"), [
    { msg: "network_notes_dropped", count: 1050 },
  ]);
  assert.ok(!lines.some((l) => l.msg === "store_write_failed"));
  const audited = async (id: number) => {
    let count = 0;
    for await (const entry of counting.store.audit({ keyId: id })) {
      if (entry.action === "network") count++;
    }
    return count;
  };
  assert.equal(await audited(flooded.id), 50);
  assert.equal(await audited(other.id), 1);
});

Deno.test("a note that cannot be written for one key costs no other key its notes, and the failure is logged", async () => {
  await using counting = await countingStore();
  const { record: first } = await counting.addKey("first");
  const { record: second } = await counting.addKey("second");
  const lines: Record<string, unknown>[] = [];
  const failing = new Proxy(counting.store, {
    get(target, name, receiver) {
      if (name !== "recordNetworkUses") {
        return Reflect.get(target, name, receiver);
      }
      return (uses: { id: number }[]) =>
        uses.some((u) => u.id === first.id)
          ? Promise.reject(Object.assign(new Error("locked"), { code: "busy" }))
          : target.recordNetworkUses(uses as never);
    },
  });
  const recorder = new UsageRecorder(failing, {
    flushMs: 60_000,
    log: (fields) => lines.push(fields),
  });
  const now = Date.now();
  recorder.used(first.id, lockoutKey("192.0.2.7"), now);
  recorder.used(second.id, lockoutKey("198.51.100.7"), now);
  await recorder.close();
  await counting.settled();
  assert.deepEqual(lines, [
    { msg: "key_new_network", apiKeyId: second.id, network: "198.51.100.0/24" },
    { msg: "store_write_failed", what: "usage", code: "busy" },
  ]);
});

Deno.test("a flood that fills the flush's notes from other keys still lets a key's first use from a new network be logged and audited", async () => {
  await using counting = await countingStore();
  const { record: victim } = await counting.addKey("victim");
  const lines: Record<string, unknown>[] = [];
  const recorder = new UsageRecorder(counting.store, {
    flushMs: 60_000,
    log: (fields) => lines.push(fields),
  });
  const now = Date.now();
  // 10,000 notes from 200 flooding keys (ids no key has: nothing is
  // written for them) fill the flush's bound.
  for (let key = 0; key < NETWORK_NOTES_MAX / 50; key++) {
    for (let i = 0; i < 50; i++) {
      recorder.used(10_000 + key, lockoutKey(`10.${key}.${i}.7`), now);
    }
  }
  recorder.used(victim.id, lockoutKey("203.0.113.9"), now);
  await recorder.close();
  await counting.settled();
  assert.deepEqual(lines.filter((l) => l.apiKeyId === victim.id), [
    { msg: "key_new_network", apiKeyId: victim.id, network: "203.0.113.0/24" },
  ]);
});
