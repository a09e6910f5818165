/**
 * Checks of imported records, shared by every store's import, so that a
 * hand-edited, truncated or hostile backup is refused line by line before it
 * lands: ids a store can hand on without overflow, no id or hash twice, and
 * every text bounded so that each record fits in one store value and every
 * export of a store can be imported again.
 */

import {
  type AuditEntry,
  type KeyRecord,
  MAX_KEY_ID,
  nameKey,
  normalizeEmail,
  StoreInputError,
} from "./store.ts";

/**
 * Longest revoke reason an import takes. Must be at least what the console
 * lets `keys revoke --reason` store, or such an export would not restore.
 */
export const IMPORT_REASON_MAX = 1000;
/** Longest audit actor (OS user and host) an import takes; the console cuts its own to this. */
export const IMPORT_ACTOR_MAX = 256;
/** Names of revoked keys are not checked as new names are, only bounded. */
const REVOKED_NAME_MAX = 256;
const HINT_MAX = 64;
const EXPOSED_FROM_MAX = 256;
/** An audit detail is a reason or a short sentence about an id or an address. */
const DETAIL_MAX = IMPORT_REASON_MAX + 300;

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$/;
const ACTIONS = new Set(["create", "revoke", "rotate", "expose", "import"]);

function fail(what: string, id: unknown): never {
  throw new StoreInputError(
    `The import's key ${
      JSON.stringify(id)
    } has ${what}; fix or regenerate the export`,
  );
}

function isIso(value: unknown): value is string {
  return typeof value === "string" && ISO.test(value) &&
    !Number.isNaN(Date.parse(value));
}

function isoOrNull(value: unknown): boolean {
  return value === null || isIso(value);
}

function textOrNull(value: unknown, max: number): boolean {
  return value === null || (typeof value === "string" && value.length <= max);
}

/** Runs a field check of store.ts and words its refusal as the import's. */
function _field<T>(id: number, check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (error instanceof StoreInputError) {
      fail(`a bad field (${error.message})`, id);
    }
    throw error;
  }
}

/**
 * Checks one import's records and audit lines as they stream by, remembering
 * what must stay unique across the whole import.
 */
export class ImportChecker {
  #names = new Set<string>();
  #ids = new Set<number>();
  #hashes = new Set<string>();
  /** The highest key id seen so far; 0 before any. */
  maxId = 0;

  /** Validates one imported key record and returns it in canonical shape. */
  record(record: KeyRecord): KeyRecord {
    if (typeof record !== "object" || record === null) fail("no record", null);
    const id = record.id;
    if (!Number.isInteger(id) || id < 1 || id > MAX_KEY_ID) {
      fail(`an id that is not a whole number from 1 to ${MAX_KEY_ID}`, id);
    }
    if (this.#ids.has(id)) fail("an id another key has", id);
    if (
      typeof record.hash !== "string" || !/^[0-9a-f]{64}$/.test(record.hash)
    ) {
      fail("a hash that is not SHA-256 hex", id);
    }
    if (this.#hashes.has(record.hash)) fail("a hash another key has", id);
    if (record.status !== "valid" && record.status !== "revoked") {
      fail("an unknown status", id);
    }
    if (typeof record.name !== "string") fail("no name", id);
    if (typeof record.email !== "string") fail("no e-mail", id);
    _field(id, () => normalizeEmail(record.email));
    if (record.status === "valid") {
      const key = _field(id, () => nameKey(record.name));
      if (this.#names.has(key)) fail("a name another valid key has", id);
      this.#names.add(key);
    } else if (record.name.length > REVOKED_NAME_MAX) {
      fail(`a name longer than ${REVOKED_NAME_MAX} characters`, id);
    }
    const hint = record.hint ?? "";
    if (typeof hint !== "string" || hint.length > HINT_MAX) {
      fail(`a hint that is not text of at most ${HINT_MAX} characters`, id);
    }
    if (!isIso(record.createdAt)) fail("a bad createdAt", id);
    for (const field of ["revokedAt", "exposedAt", "lastUsedAt"] as const) {
      if (!isoOrNull(record[field] ?? null)) fail(`a bad ${field}`, id);
    }
    if (!textOrNull(record.revokedReason ?? null, IMPORT_REASON_MAX)) {
      fail(`a revokedReason longer than ${IMPORT_REASON_MAX} characters`, id);
    }
    if (!textOrNull(record.exposedFrom ?? null, EXPOSED_FROM_MAX)) {
      fail(`an exposedFrom longer than ${EXPOSED_FROM_MAX} characters`, id);
    }
    this.#ids.add(id);
    this.#hashes.add(record.hash);
    this.maxId = Math.max(this.maxId, id);
    return {
      id,
      name: record.name,
      email: record.email,
      status: record.status,
      hash: record.hash,
      hint,
      createdAt: record.createdAt,
      revokedAt: record.revokedAt ?? null,
      revokedReason: record.revokedReason ?? null,
      exposedAt: record.exposedAt ?? null,
      exposedFrom: record.exposedFrom ?? null,
      lastUsedAt: record.lastUsedAt ?? null,
    };
  }

  /** Validates one imported audit line and returns it in canonical shape. */
  audit(entry: AuditEntry): AuditEntry {
    if (
      typeof entry !== "object" || entry === null ||
      !ACTIONS.has(entry.action) || !isIso(entry.at) ||
      !Number.isInteger(entry.keyId) || entry.keyId < 0 ||
      entry.keyId > MAX_KEY_ID || typeof entry.actor !== "string" ||
      entry.actor.length > IMPORT_ACTOR_MAX ||
      !textOrNull(entry.detail ?? null, DETAIL_MAX)
    ) {
      throw new StoreInputError(
        `The import holds a malformed audit line ${
          JSON.stringify(entry).slice(0, 120)
        }; fix or regenerate the export`,
      );
    }
    return {
      at: entry.at,
      action: entry.action,
      keyId: entry.keyId,
      actor: entry.actor,
      detail: entry.detail ?? null,
    };
  }
}
