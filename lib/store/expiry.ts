/**
 * The one expiry rule: when a key stops authenticating, how a key past it reads
 * everywhere (revoked as of then, written so or not yet), and the one way its
 * revocation is written, by the server meeting such a key and by the console
 * before a command. The request-time check (lib/auth/key_lookup.ts), readers
 * (`keys list`, `show`), the stores' deadline index and both writers use it.
 * @module
 */

import type { KeyRecord, KeyStore, RevokeResult } from "./types.ts";

/** When a key stops authenticating, in ms since the epoch; Infinity for never. */
export function expiryMs(record: KeyRecord): number {
  if (record.expiresAt === null) return Infinity;
  const ms = Date.parse(record.expiresAt);
  // A time nobody can read fails closed: the key counts as expired.
  return Number.isNaN(ms) ? -Infinity : ms;
}

/** Whether a key with deadline `expires` has stopped authenticating at `now`. */
export function hasExpired(expires: number, now: number): boolean {
  return now >= expires;
}

/**
 * The record at `now`: a valid key past `expiresAt` is revoked as of then,
 * written or not, so no reader depends on a background job.
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
      ? "expired"
      : `rotation overlap ended: replaced by key ${record.replacedBy}`,
  };
}

/** Who wrote down an expiry: a server that met the key, or the console's housekeeping. */
export type ExpiryActor = "server" | "expiry";

/** Writes down once, audited, the revocation key `id`'s passed deadline decided. */
export function retireExpired(
  store: Pick<KeyStore, "retire">,
  id: number,
  options: { actor: ExpiryActor },
): Promise<RevokeResult> {
  return store.retire(id, { actor: options.actor, cause: "deadline" });
}

/**
 * Writes down every valid key past its deadline; returns how many. Reads the
 * deadline index: as cheap at 100,000 keys as at 10.
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
