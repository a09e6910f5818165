/**
 * Committed rate-limit shares of one hot counter, by server registration id
 * (lib/auth/share_ledger.ts owns the protocol): what a record holds, how one
 * is read back field by field, and what a database must offer for them. A
 * record written wrong (by a bug, a newer version or a hand) reads as null:
 * no server takes a share from it, and the next poll removes it.
 * @module
 */

/** A hot counter's committed shares and the servers asking for more. */
export interface ShareRecord {
  /** The limit's count the shares split; a record of another is void. */
  limit: number;
  /** The limit's window in seconds, for the record's idle time. */
  window: number;
  /** Committed shares by registration id: they add up to at most `limit`. */
  shares: Record<string, number>;
  /** Requests a server would take beyond its share, by registration id. */
  wants: Record<string, number>;
  /**
   * Holders with no room to lend, by registration id: milliseconds from
   * their commit until their oldest counted request leaves the window,
   * kept until the holder has room. A want written anew, or by a server
   * that finds one run out, clears them all, so each was given after it.
   */
  answers: Record<string, number>;
}

/** A record as listed: null when it cannot be read. */
export interface StoredShares {
  counter: number;
  version: string;
  record: ShareRecord | null;
}

/** The records' store: one entry per hot counter under a versionstamp. */
export interface ShareStore {
  /** Every record, in counter order. */
  list(): Promise<StoredShares[]>;
  /** Counter `counter`'s record and version (both null when absent). */
  get(
    counter: number,
  ): Promise<{ version: string | null; record: ShareRecord | null }>;
  /**
   * Writes `record` (null: removes it) only if the entry is still at
   * `version` (null: still absent); `ok` false when it is not.
   */
  put(
    counter: number,
    record: ShareRecord | null,
    version: string | null,
  ): Promise<{ ok: boolean; version: string | null }>;
}

/** More servers than any installation runs: a record naming more is unread. */
const MAX_SERVERS = 256;
const ID_MAX = 64;

/** A record as stored, checked field by field; null when any is wrong. */
export function readShares(value: unknown): ShareRecord | null {
  if (typeof value !== "object" || value === null) return null;
  const fields = value as Record<keyof ShareRecord, unknown>;
  const { limit, window } = fields;
  if (!isCount(limit) || limit < 1 || !isCount(window) || window < 1) {
    return null;
  }
  const shares = amounts(fields.shares, limit);
  const wants = amounts(fields.wants, limit);
  // Absent in a record written by 1.1: no server has answered.
  const answers = fields.answers === undefined
    ? {}
    : amounts(fields.answers, window * 1000);
  if (shares === null || wants === null || answers === null) return null;
  // The invariant every commit keeps: a record breaking it grants nothing.
  if (sumOf(shares) > limit) return null;
  return { limit, window, shares, wants, answers };
}

function amounts(value: unknown, most: number): Record<string, number> | null {
  if (typeof value !== "object" || value === null) return null;
  const entries = Object.entries(value);
  if (entries.length > MAX_SERVERS) return null;
  const read: Record<string, number> = {};
  for (const [id, amount] of entries) {
    if (id.length === 0 || id.length > ID_MAX) return null;
    if (!isCount(amount) || amount > most) return null;
    read[id] = amount;
  }
  return read;
}

function isCount(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) >= 0;
}

/** A record to change, its maps copied. */
export function copyShares(record: ShareRecord): ShareRecord {
  return {
    ...record,
    shares: { ...record.shares },
    wants: { ...record.wants },
    answers: { ...record.answers },
  };
}

/** The sum of a record's shares or wants. */
export function sumOf(amounts: Record<string, number>): number {
  let sum = 0;
  for (const amount of Object.values(amounts)) sum += amount;
  return sum;
}

/** Whether two records say the same. */
export function sameShares(a: ShareRecord, b: ShareRecord): boolean {
  const equal = (x: Record<string, number>, y: Record<string, number>) => {
    const keys = Object.keys(x);
    return keys.length === Object.keys(y).length &&
      keys.every((key) => x[key] === y[key]);
  };
  return a.limit === b.limit && a.window === b.window &&
    equal(a.shares, b.shares) && equal(a.wants, b.wants) &&
    equal(a.answers, b.answers);
}
