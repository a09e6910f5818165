/**
 * The one expiry rule: when a key stops authenticating, how a key past that
 * time reads everywhere (revoked as of it, whether or not a store has
 * written so yet), and the one way its revocation is written down, by the
 * server that meets such a key and by the console before a command. The
 * request-time check (lib/auth/key_lookup.ts), the readers (`keys list`, `show`),
 * the stores' index of deadlines and both writers all go through here.
 *
 * @module
 */

import type { KeyRecord, KeyStore, RevokeResult } from "./types.ts";

/** The reason of a key whose own lifetime ended. */
export const EXPIRED_REASON = "expired";

/** The reason of a key whose rotation overlap ended at its deadline. */
export function overlapEndedReason(createdId: number): string {
  return `rotation overlap ended: replaced by key ${createdId}`;
}

/** When a key stops authenticating, in ms since the epoch; Infinity for never. */
export function expiryMs(record: KeyRecord): number {
  if (record.expiresAt === null) return Infinity;
  const ms = Date.parse(record.expiresAt);
  // A time nobody can read fails closed: the key counts as expired.
  return Number.isNaN(ms) ? -Infinity : ms;
}

/**
 * Whether a key whose deadline is `expires` ({@linkcode expiryMs}) has
 * stopped authenticating at `now`: from the deadline itself on.
 */
export function hasExpired(expires: number, now: number): boolean {
  return now >= expires;
}

/**
 * The record as it stands at `now`: a valid key past its `expiresAt` is
 * revoked as of that time, whether or not a store has written so yet, so
 * that no reader depends on a background job.
 */
export function recordAt(record: KeyRecord, now: number): KeyRecord {
  if (record.status !== "valid" || !hasExpired(expiryMs(record), now)) {
    return record;
  }
  return {
    ...record,
    status: "revoked",
    revokedAt: record.expiresAt,
    revokedReason: record.replacedBy === null
      ? EXPIRED_REASON
      : overlapEndedReason(record.replacedBy),
  };
}

/**
 * Who the audit log says wrote down an expiry: the server that met the key
 * (`server`), or the console's housekeeping before a command (`expiry`).
 */
export type ExpiryActor = "server" | "expiry";

/**
 * Writes down the revocation that key `id`'s deadline already decided:
 * once, audited under the key; nothing when it has not expired.
 */
export function retireExpired(
  store: Pick<KeyStore, "retire">,
  id: number,
  options: { actor: ExpiryActor },
): Promise<RevokeResult> {
  return store.retire(id, { actor: options.actor, cause: "deadline" });
}

/**
 * Writes down every valid key past its deadline at `now`; returns how many.
 * It reads the store's index of deadlines, so it costs as much at 100,000
 * keys as at 10.
 */
export async function retireDue(
  store: Pick<KeyStore, "retire" | "dueKeys">,
  options: { actor: ExpiryActor; now?: Date },
): Promise<number> {
  const due: number[] = [];
  for await (const id of store.dueKeys(options.now ?? new Date())) {
    due.push(id);
  }
  for (const id of due) await retireExpired(store, id, options);
  return due.length;
}
