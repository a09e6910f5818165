/**
 * The webhook outbox on {@linkcode Entries}:
 *
 * - `["webhooks", "endpoints"]` → EndpointList, read by every change in its
 *   first read, so the deliveries it raises go in its own commit
 * - `["webhook_due", endpoint, ms, delivery]` → a pending Delivery, due at
 *   `ms`; a claim moves it to the claim's end, so a sender that dies
 *   mid-delivery leaves it due again
 * - `["webhook_done", delivery]` → a finished Delivery (delivered, failed,
 *   dropped), the latest DONE_KEPT
 * - `["webhook_marks", …]` → what an event raised once already (a rate
 *   limit's window, an expiry reminder)
 *
 * Every move is a compare-and-set on the entry as read, so of several
 * servers exactly one claims, finishes or drops a delivery.
 * @module
 */

import type { ChangeDraft } from "../backend.ts";
import type { Alters } from "../change.ts";
import type { Atomic, Entries, Entry, EntryKey, Present } from "../entries.ts";
import type { KeyRecord } from "../types.ts";
import {
  type Attempt,
  ATTEMPTS_KEPT,
  type Claim,
  type Delivery,
  type EndpointList,
  type KeyEventType,
  MAX_ENDPOINTS,
  type StoredEndpoint,
  TRAFFIC_EVENTS,
  type WebhookEndpoint,
  type WebhookEvent,
  type WebhookStore,
} from "../webhook_types.ts";
import {
  deliveryEndpoint,
  keyEvent,
  lineEvent,
  newDelivery,
  type Raised,
} from "../webhooks.ts";
import { busy, MAX_TRIES } from "./_keys.ts";
import { WebhookEndpointError } from "../errors.ts";

export const ENDPOINTS = ["webhooks", "endpoints"] as const;
const dueKey = (endpoint: number, ms: number, id: string): EntryKey => [
  "webhook_due",
  endpoint,
  ms,
  id,
];
const doneKey = (id: string): EntryKey => ["webhook_done", id];
export const markKey = (parts: (string | number)[]): EntryKey => [
  "webhook_marks",
  ...parts,
];

/**
 * Writes into `op` one delivery per subscribed endpoint for each event the
 * draft raised (its audit lines, and `raised`); call before the draft's
 * own checks are added, as it may read the records of its lines.
 */
export async function queueEvents<A extends Alters>(
  op: Atomic,
  draft: ChangeDraft<A>,
  hooks: Entry<EndpointList>,
): Promise<void> {
  const endpoints = hooks.value?.endpoints ?? [];
  if (endpoints.length === 0) return;
  const events: Raised[] = [];
  for (const [i, { entry }] of draft.numbered(0n).entries()) {
    const record = written(draft, entry.keyId) ??
      await draft.get(entry.keyId);
    const event = record && lineEvent(entry, record, draft.lineFacts[i]);
    if (event) events.push(event);
  }
  events.push(...draft.raised);
  if (events.length === 0) return;
  // An endpoint added or removed meanwhile reruns the change.
  op.check(hooks);
  for (const raised of events) {
    const event = keyEvent(raised, draft.at);
    for (const endpoint of endpoints) {
      if (!endpoint.events.includes(raised.type)) continue;
      const delivery = newDelivery(event, endpoint.id);
      op.set(dueKey(endpoint.id, draft.at.getTime(), delivery.id), delivery);
    }
  }
}

/** The record the draft last wrote for key `id`, if it wrote one. */
function written<A extends Alters>(
  draft: ChangeDraft<A>,
  id: number,
): KeyRecord | null {
  for (let i = draft.writes.length - 1; i >= 0; i--) {
    const write = draft.writes[i];
    if (write.kind !== "usage" && write.record.id === id) return write.record;
  }
  return null;
}

/** The endpoints and outbox of one store. */
export class WebhookEntries implements WebhookStore {
  #kv: Entries;

  constructor(kv: Entries) {
    this.#kv = kv;
  }

  /** Every endpoint, with the signing key the sender needs. */
  async endpoints(): Promise<StoredEndpoint[]> {
    return (await this.#kv.get<EndpointList>(ENDPOINTS)).value?.endpoints ??
      [];
  }

  /** Adds an endpoint under the next id; refused past {@linkcode MAX_ENDPOINTS}. */
  addEndpoint(
    input: { url: string; events: KeyEventType[]; signingKey: string },
  ): Promise<WebhookEndpoint> {
    return this.#edit((list, at) => {
      if (list.endpoints.length >= MAX_ENDPOINTS) {
        throw new WebhookEndpointError("endpoints_full", MAX_ENDPOINTS);
      }
      const endpoint = {
        id: list.lastId + 1,
        ...input,
        createdAt: at,
        secretSetAt: at,
      };
      return {
        list: { lastId: endpoint.id, endpoints: [...list.endpoints, endpoint] },
        result: shown(endpoint),
      };
    });
  }

  /** Removes an endpoint; its pending deliveries are dropped by the next sweep. */
  removeEndpoint(id: number): Promise<WebhookEndpoint> {
    return this.#edit((list) => {
      const found = list.endpoints.find((e) => e.id === id);
      if (!found) throw new WebhookEndpointError("endpoint_not_found", id);
      const endpoints = list.endpoints.filter((e) => e.id !== id);
      return { list: { ...list, endpoints }, result: shown(found) };
    });
  }

  /** Replaces an endpoint's signing key. */
  setSigningKey(id: number, signingKey: string): Promise<WebhookEndpoint> {
    return this.#edit((list, at) => {
      const found = list.endpoints.find((e) => e.id === id);
      if (!found) throw new WebhookEndpointError("endpoint_not_found", id);
      const changed = { ...found, signingKey, secretSetAt: at };
      const endpoints = list.endpoints.map((e) => e.id === id ? changed : e);
      return { list: { ...list, endpoints }, result: shown(changed) };
    });
  }

  async #edit<T>(
    work: (list: EndpointList, at: string) => { list: EndpointList; result: T },
  ): Promise<T> {
    for (let tries = 0; tries < MAX_TRIES; tries++) {
      const entry = await this.#kv.get<EndpointList>(ENDPOINTS);
      const { list, result } = work(
        entry.value ?? { lastId: 0, endpoints: [] },
        new Date().toISOString(),
      );
      const done = await this.#kv.atomic().check(entry).set(ENDPOINTS, list)
        .commit();
      if (done.ok) return result;
    }
    throw busy();
  }

  /** Queues `event` for one endpoint, due at once (a test, a redelivery). */
  async enqueue(event: WebhookEvent, endpointId: number): Promise<Delivery> {
    const delivery = newDelivery(event, endpointId);
    const key = dueKey(endpointId, Date.parse(event.timestamp), delivery.id);
    await this.#kv.atomic().check({ key, versionstamp: null }).set(
      key,
      delivery,
    ).commit();
    return delivery;
  }

  /** Up to `limit` of an endpoint's deliveries due at `now`, oldest due first. */
  async due(endpointId: number, now: number, limit: number): Promise<Claim[]> {
    const found: Claim[] = [];
    for await (
      const entry of this.#kv.list<Delivery>({
        start: ["webhook_due", endpointId],
        end: ["webhook_due", endpointId, now + 1],
      }, { limit })
    ) {
      found.push(claimOf(entry));
    }
    return found;
  }

  /**
   * Takes a due delivery until `untilMs`, counting the try: null when
   * another server took or finished it first.
   */
  async claim(claim: Claim, untilMs: number): Promise<Claim | null> {
    const { delivery } = claim;
    const taken = { ...delivery, tries: delivery.tries + 1 };
    const key = dueKey(delivery.endpointId, untilMs, delivery.id);
    const done = await this.#kv.atomic().check(claim).delete(claim.key)
      .set(key, taken).commit();
    return done.ok
      ? { delivery: taken, key, versionstamp: done.versionstamp }
      : null;
  }

  /**
   * Records a try: due again at `nextMs`, or finished as `state`. False when
   * the claim ran out and another server holds the delivery now.
   */
  async finish(
    claim: Claim,
    attempt: Attempt,
    next: { nextMs: number } | { state: Delivery["state"] },
  ): Promise<boolean> {
    const attempts = [...claim.delivery.attempts, attempt].slice(
      -ATTEMPTS_KEPT,
    );
    const op = this.#kv.atomic().check(claim).delete(claim.key);
    if ("nextMs" in next) {
      const delivery: Delivery = {
        ...claim.delivery,
        attempts,
        dueAt: new Date(next.nextMs).toISOString(),
      };
      op.set(dueKey(delivery.endpointId, next.nextMs, delivery.id), delivery);
    } else {
      op.set(doneKey(claim.delivery.id), {
        ...claim.delivery,
        attempts,
        state: next.state,
        dueAt: attempt.at,
      });
    }
    return (await op.commit()).ok;
  }

  /** Every delivery pending and kept, the latest first (by when due or finished). */
  async deliveries(
    options: { endpointId?: number } = {},
  ): Promise<Delivery[]> {
    const { endpointId } = options;
    const all: Delivery[] = [];
    // Pending ones are keyed by endpoint, so only its own are read; finished
    // ones are keyed by delivery alone and are filtered.
    for await (const { value } of this.#pending(endpointId)) all.push(value);
    for await (
      const { value } of this.#kv.list<Delivery>({ prefix: ["webhook_done"] })
    ) {
      if (endpointId === undefined || value.endpointId === endpointId) {
        all.push(value);
      }
    }
    return all
      .sort((a, b) =>
        b.dueAt.localeCompare(a.dueAt) || b.id.localeCompare(a.id)
      );
  }

  /** Queues a finished delivery again, due now; null when none has this id. */
  async redeliver(id: string, now: Date): Promise<Delivery | null> {
    const endpointId = deliveryEndpoint(id);
    if (endpointId === null) return null;
    for (let tries = 0; tries < MAX_TRIES; tries++) {
      const done = await this.#kv.get<Delivery>(doneKey(id));
      if (done.value === null) {
        // Pending already: it will be sent without being asked.
        for await (const entry of this.#pending(endpointId)) {
          if (entry.value.id === id) return entry.value;
        }
        return null;
      }
      const again: Delivery = {
        ...done.value,
        state: "pending",
        dueAt: now.toISOString(),
      };
      const key = dueKey(endpointId, now.getTime(), id);
      const moved = await this.#kv.atomic().check(done).delete(done.key)
        .set(key, again).commit();
      if (moved.ok) return again;
    }
    throw busy();
  }

  /**
   * Keeps the outbox bounded: drops pending deliveries of removed endpoints
   * and, past `maxPending`, the oldest, those raised by traffic first;
   * forgets all but the latest
   * `doneKept` finished ones. Returns what it dropped.
   */
  async sweep(
    options: { maxPending: number; doneKept: number; now: Date },
  ): Promise<Delivery[]> {
    const ids = new Set((await this.endpoints()).map((e) => e.id));
    const pending: Present<Delivery>[] = [];
    for await (const entry of this.#pending()) pending.push(entry);
    const kept = (entry: Present<Delivery>) =>
      TRAFFIC_EVENTS.has(entry.value.event.type) ? 0 : 1;
    pending.sort((a, b) =>
      kept(a) - kept(b) || a.value.id.localeCompare(b.value.id)
    );
    const over = pending.length - options.maxPending;
    const dropped: Delivery[] = [];
    for (const [i, entry] of pending.entries()) {
      if (i >= over && ids.has(entry.value.endpointId)) continue;
      const delivery: Delivery = {
        ...entry.value,
        state: "dropped",
        dueAt: options.now.toISOString(),
      };
      const done = await this.#kv.atomic().check(entry).delete(entry.key)
        .set(doneKey(delivery.id), delivery).commit();
      if (done.ok) dropped.push(delivery);
    }
    const done: Present<unknown>[] = [];
    for await (const entry of this.#kv.list({ prefix: ["webhook_done"] })) {
      done.push(entry);
    }
    const excess = Math.max(0, done.length - options.doneKept);
    for (const entry of done.slice(0, excess)) {
      await this.#kv.atomic().check(entry).delete(entry.key).commit();
    }
    return dropped;
  }

  #pending(endpointId?: number): AsyncIterable<Present<Delivery>> {
    return this.#kv.list<Delivery>({
      prefix: endpointId === undefined
        ? ["webhook_due"]
        : ["webhook_due", endpointId],
    }, { batchSize: 500 });
  }
}

/** An endpoint without its signing key, which only the sender reads. */
function shown(endpoint: StoredEndpoint): WebhookEndpoint {
  const { signingKey: _, ...rest } = endpoint;
  return rest;
}

function claimOf(entry: Present<Delivery>): Claim {
  return {
    delivery: entry.value,
    key: entry.key,
    versionstamp: entry.versionstamp,
  };
}
