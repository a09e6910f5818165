/**
 * Checks of imported records, shared by every store, so a hand-edited,
 * truncated or hostile backup is refused line by line before it lands: ids a
 * store can hand on without overflow, no id or hash twice, every text bounded
 * so each record fits one store value and every export imports again.
 */

import {
  ImportAuditError,
  type ImportDefect,
  ImportKeyError,
  InvalidFieldError,
} from "./errors.ts";
import {
  AUDIT_ACTIONS,
  MAX_KEY_ID,
  nameKey,
  newRecord,
  normalizeEmail,
} from "./records.ts";
import { storedRateLimit } from "./rate_limits.ts";
import type { AuditEntry, KeyRecord } from "./types.ts";
import {
  NETWORKS_KEPT,
  normalizeAllowFrom,
  REFUSED_KEPT,
} from "./usage_lists.ts";

/** Longest revoke reason an import takes: at least what `keys revoke --reason` stores, so exports restore. */
export const IMPORT_REASON_MAX = 1000;
/** Longest audit actor (OS user and host) an import takes; the console cuts its own to this. */
export const IMPORT_ACTOR_MAX = 256;
/** Names of revoked and retiring keys are not checked as new names are, only bounded. */
const REVOKED_NAME_MAX = 256;
const HINT_MAX = 64;
const EXPOSED_FROM_MAX = 256;
/** An audit detail is a reason or a short sentence about an id or an address. */
const DETAIL_MAX = IMPORT_REASON_MAX + 300;

const LINKS = ["replacedBy", "retires", "rotatedFrom", "rateCounter"] as const;
const TIMES = ["revokedAt", "exposedAt", "lastUsedAt", "expiresAt"] as const;
const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/;
const ACTIONS = new Set<string>(AUDIT_ACTIONS);
/** Every field of a record: an export writes them all. */
const RECORD_FIELDS = Object.keys(
  newRecord(0, { name: "", email: "", hash: "", hint: "" }, new Date(0)),
) as (keyof KeyRecord)[];

function fail(
  id: unknown,
  defect: ImportDefect,
  details?: ConstructorParameters<typeof ImportKeyError>[2],
): never {
  throw new ImportKeyError(id, defect, details);
}

function isIso(value: unknown): value is string {
  return typeof value === "string" && ISO.test(value) &&
    !Number.isNaN(Date.parse(value));
}

function textOrNull(value: unknown, max: number): boolean {
  return value === null || (typeof value === "string" && value.length <= max);
}

/** Runs a field rule of records.ts and turns its refusal into the import's. */
function _field<T>(id: number, check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (error instanceof InvalidFieldError) {
      fail(id, "field_invalid", { invalid: error });
    }
    throw error;
  }
}

/**
 * Rotation links are key ids or null, and only as a rotation writes them: no
 * key replaces or retires itself, a replacement has a later id than the key it
 * replaced (ids only grow), and a valid key in an overlap has its deadline.
 */
function checkLinks(record: KeyRecord): void {
  for (const field of LINKS) {
    const value = record[field];
    if (
      value !== null &&
      !(Number.isInteger(value) && value >= 1 && value <= MAX_KEY_ID)
    ) {
      fail(record.id, "id_out_of_range", { limit: MAX_KEY_ID });
    }
  }
  for (const field of ["replacedBy", "retires"] as const) {
    if (record[field] === record.id) {
      fail(record.id, "link_invalid", { recordField: field });
    }
  }
  if (record.rotatedFrom !== null && record.rotatedFrom >= record.id) {
    fail(record.id, "link_invalid", { recordField: "rotatedFrom" });
  }
  if (
    record.status === "valid" && record.replacedBy !== null &&
    record.expiresAt === null
  ) {
    fail(record.id, "link_invalid", { recordField: "replacedBy" });
  }
}

/** The usage fields of an imported record, checked and bounded. */
function importedUsage(
  record: Pick<KeyRecord, "allowFrom" | "networks" | "refusedUses">,
  refuse: (recordField: string) => never,
): Pick<KeyRecord, "allowFrom" | "networks" | "refusedUses"> {
  let allowFrom: string[] | null = null;
  if (record.allowFrom !== null) {
    if (
      !Array.isArray(record.allowFrom) ||
      !record.allowFrom.every((r) => typeof r === "string")
    ) refuse("allowFrom");
    try {
      allowFrom = normalizeAllowFrom(record.allowFrom);
    } catch (error) {
      if (error instanceof InvalidFieldError) refuse("allowFrom");
      throw error;
    }
  }
  const networks = record.networks;
  if (
    !Array.isArray(networks) || networks.length > NETWORKS_KEPT ||
    !networks.every((n) =>
      typeof n === "object" && n !== null &&
      typeof n.network === "string" && n.network.length <= 64 &&
      isIso(n.firstSeenAt) && isIso(n.lastSeenAt)
    )
  ) refuse("networks");
  const refused = record.refusedUses;
  if (
    !Array.isArray(refused) || refused.length > REFUSED_KEPT ||
    !refused.every((u) =>
      typeof u === "object" && u !== null &&
      typeof u.address === "string" && u.address.length <= 64 && isIso(u.at)
    )
  ) refuse("refusedUses");
  return {
    allowFrom,
    networks: networks.map((n) => ({
      network: n.network,
      firstSeenAt: n.firstSeenAt,
      lastSeenAt: n.lastSeenAt,
    })),
    refusedUses: refused.map((u) => ({ address: u.address, at: u.at })),
  };
}

/** Checks an import's items as they stream by, remembering what must stay unique. */
export class ImportChecker {
  #names = new Set<string>();
  #ids = new Set<number>();
  #hashes = new Set<string>();
  /** Each key's replacement, for the `retires` links checked at the end. */
  #replacedBy = new Map<number, number>();
  #retires: { id: number; retires: number }[] = [];
  /** Each rotated key's predecessor, for the links checked at the end. */
  #rotatedFrom = new Map<number, number>();
  #counters: { id: number; counter: number }[] = [];
  /** The highest key id seen so far; 0 before any. */
  maxId = 0;

  /** Validates one imported key record and returns it in canonical shape. */
  record(record: KeyRecord): KeyRecord {
    if (typeof record !== "object" || record === null) {
      fail(null, "not_a_record");
    }
    const id = record.id;
    if (!Number.isInteger(id) || id < 1 || id > MAX_KEY_ID) {
      fail(id, "id_out_of_range", { limit: MAX_KEY_ID });
    }
    if (this.#ids.has(id)) fail(id, "id_repeated");
    for (const field of RECORD_FIELDS) {
      if (!(field in record)) fail(id, "field_missing", { recordField: field });
    }
    if (
      typeof record.hash !== "string" || !/^[0-9a-f]{64}$/.test(record.hash)
    ) {
      fail(id, "hash_malformed");
    }
    if (this.#hashes.has(record.hash)) fail(id, "hash_repeated");
    if (record.status !== "valid" && record.status !== "revoked") {
      fail(id, "status_unknown");
    }
    if (typeof record.name !== "string") fail(id, "name_missing");
    if (typeof record.email !== "string") fail(id, "email_missing");
    _field(id, () => normalizeEmail(record.email));
    if (record.status === "valid" && record.replacedBy === null) {
      const key = _field(id, () => nameKey(record.name));
      if (this.#names.has(key)) fail(id, "name_repeated");
      this.#names.add(key);
    } else if (record.name.length > REVOKED_NAME_MAX) {
      fail(id, "name_too_long", { limit: REVOKED_NAME_MAX });
    }
    if (typeof record.hint !== "string" || record.hint.length > HINT_MAX) {
      fail(id, "hint_malformed", { limit: HINT_MAX });
    }
    if (!isIso(record.createdAt)) {
      fail(id, "time_malformed", { recordField: "createdAt" });
    }
    for (const field of TIMES) {
      if (record[field] !== null && !isIso(record[field])) {
        fail(id, "time_malformed", { recordField: field });
      }
    }
    if (!textOrNull(record.revokedReason, IMPORT_REASON_MAX)) {
      fail(id, "text_too_long", {
        recordField: "revokedReason",
        limit: IMPORT_REASON_MAX,
      });
    }
    if (!textOrNull(record.exposedFrom, EXPOSED_FROM_MAX)) {
      fail(id, "text_too_long", {
        recordField: "exposedFrom",
        limit: EXPOSED_FROM_MAX,
      });
    }
    checkLinks(record);
    const usage = importedUsage(
      record,
      (recordField) => fail(id, "usage_malformed", { recordField }),
    );
    if (record.replacedBy !== null) this.#replacedBy.set(id, record.replacedBy);
    if (record.retires !== null) {
      this.#retires.push({ id, retires: record.retires });
    }
    if (record.rotatedFrom !== null) {
      this.#rotatedFrom.set(id, record.rotatedFrom);
    }
    if (record.rateCounter !== null) {
      this.#counters.push({ id, counter: record.rateCounter });
    }
    this.#ids.add(id);
    this.#hashes.add(record.hash);
    this.maxId = Math.max(this.maxId, id);
    // Only the record's own fields: nothing else reaches the store.
    const fields = Object.fromEntries(
      RECORD_FIELDS.map((field) => [field, record[field]]),
    ) as unknown as KeyRecord;
    const rateLimit = storedRateLimit(record.rateLimit);
    if (record.rateLimit !== null && rateLimit === null) {
      fail(id, "usage_malformed", { recordField: "rateLimit" });
    }
    return { ...fields, rateLimit, ...usage };
  }

  /**
   * The checks that need every record, once the last is in: a key that
   * retires another at its first use must be that key's replacement, or
   * its first use would revoke a key no rotation linked to it; a key was
   * rotated from a key of the import; and a key's `rateCounter` names a key
   * of its own rotation line no later than itself, or two unrelated keys
   * would use up one line's count. A rotation now writes the line's first
   * key; 1.1 wrote an earlier key of the line (its predecessor's
   * predecessor's count), which imports too, and whose line counts as
   * written until its next rotation names the first key.
   */
  finish(): void {
    for (const { id, retires } of this.#retires) {
      if (this.#replacedBy.get(retires) !== id) {
        fail(id, "link_invalid", { recordField: "retires" });
      }
    }
    // A rotation links both ways: a key names the key it was rotated from
    // only if that key names it as its replacement, so no record can claim
    // a stranger's key (and, through it, its rate-limit count).
    for (const [id, from] of this.#rotatedFrom) {
      if (this.#replacedBy.get(from) !== id) {
        fail(id, "link_invalid", { recordField: "rotatedFrom" });
      }
    }
    if (this.#counters.length === 0) return;
    // Each line's first key, once per key: links lead to lower ids
    // (checkLinks) and, checked above, never branch, so a key shares a line
    // with every key of the same first key, and an earlier one is its own
    // ancestor. Walking each counter's line instead cost O(N²) on one line.
    const first = new Map<number, number>();
    for (const id of [...this.#ids].sort((a, b) => a - b)) {
      const from = this.#rotatedFrom.get(id);
      first.set(id, from === undefined ? id : first.get(from)!);
    }
    for (const { id, counter } of this.#counters) {
      if (counter > id || first.get(counter) !== first.get(id)) {
        fail(id, "link_invalid", { recordField: "rateCounter" });
      }
    }
  }

  /** Validates one imported audit line and returns it in canonical shape. */
  audit(entry: AuditEntry): AuditEntry {
    if (
      typeof entry !== "object" || entry === null ||
      !ACTIONS.has(entry.action) || !isIso(entry.at) ||
      !Number.isInteger(entry.keyId) || entry.keyId < 0 ||
      entry.keyId > MAX_KEY_ID || typeof entry.actor !== "string" ||
      entry.actor.length > IMPORT_ACTOR_MAX ||
      !textOrNull(entry.detail, DETAIL_MAX)
    ) {
      throw new ImportAuditError(JSON.stringify(entry).slice(0, 120));
    }
    return {
      at: entry.at,
      action: entry.action,
      keyId: entry.keyId,
      actor: entry.actor,
      detail: entry.detail,
    };
  }
}
