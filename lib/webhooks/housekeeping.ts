/**
 * What the sender does once a minute besides sending: keeps the outbox within
 * its bound (dropping the oldest past it, each with a log line and a count),
 * and raises the events time alone brings: `key.expiring` reminders, and
 * `key.expired` by writing down the revocation a passed deadline decided.
 * @module
 */

import { ImportStateError } from "../store/errors.ts";
import { retireExpired } from "../store/expiry.ts";
import type { KeyStore } from "../store/types.ts";
import { DONE_KEPT, MAX_PENDING } from "../store/webhook_types.ts";
import { counter } from "../util/otel.ts";

const DAY = 86_400_000;

const dropped = counter("integration.webhooks.dropped", {
  description: "Webhook deliveries dropped because the outbox was full",
});

/** Receives one log line as fields. */
type Log = (fields: Record<string, unknown>) => void;

/** Drops what is past the outbox's bound; returns how many it dropped. */
export async function sweepOutbox(
  store: Pick<KeyStore, "webhooks">,
  options: { now: Date; log: Log; maxPending?: number },
): Promise<number> {
  const gone = await store.webhooks.sweep({
    maxPending: options.maxPending ?? MAX_PENDING,
    doneKept: DONE_KEPT,
    now: options.now,
  });
  for (const delivery of gone) {
    options.log({
      msg: "webhook_dropped",
      deliveryId: delivery.id,
      endpointId: delivery.endpointId,
      type: delivery.event.type,
    });
  }
  if (gone.length > 0) dropped.add(gone.length);
  return gone.length;
}

/**
 * Raises `key.expiring` for keys within `days` of their deadline and writes
 * down the revocation of those past it (`key.expired`). Reads the deadline
 * index up to the furthest reminder: it costs what is due, not the key count.
 */
export async function remindOfExpiry(
  store: Pick<KeyStore, "dueKeys" | "get" | "retire" | "noteExpiring">,
  options: {
    now: Date;
    days: readonly number[];
    /** Reminders this process settled already, so each costs one change. */
    settled: Set<string>;
  },
): Promise<void> {
  const now = options.now.getTime();
  const horizon = new Date(now + Math.max(0, ...options.days) * DAY);
  const ids: number[] = [];
  try {
    for await (const id of store.dueKeys(horizon)) ids.push(id);
  } catch (error) {
    // No key is read during an import; the next round catches up.
    if (error instanceof ImportStateError) return;
    throw error;
  }
  const seen = new Set<string>();
  for (const id of ids) {
    const record = await store.get(id);
    if (record?.status !== "valid" || record.expiresAt === null) continue;
    const left = Date.parse(record.expiresAt) - now;
    if (left <= 0) {
      await retireExpired(store, id, { actor: "expiry" });
      continue;
    }
    const nearest = Math.min(...options.days.filter((d) => left <= d * DAY));
    const reminder = `${id} ${record.expiresAt} ${nearest}`;
    if (nearest === Infinity) continue;
    seen.add(reminder);
    if (options.settled.has(reminder)) continue;
    await store.noteExpiring(id, options);
    options.settled.add(reminder);
  }
  // Kept only while due, so the set is as large as the keys due soon.
  for (const reminder of options.settled) {
    if (!seen.has(reminder)) options.settled.delete(reminder);
  }
}
