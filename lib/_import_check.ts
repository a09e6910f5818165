/**
 * Checks of imported records, shared by every store's import, so that a
 * hand-edited or truncated backup is refused line by line before it lands.
 */

import {
  type AuditEntry,
  type KeyRecord,
  nameKey,
  normalizeEmail,
  StoreInputError,
} from "./store.ts";

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$/;
const ACTIONS = new Set(["create", "revoke", "rotate", "expose", "import"]);

function fail(what: string, id: unknown): never {
  throw new StoreInputError(
    `The import's key ${
      JSON.stringify(id)
    } has ${what}; fix or regenerate the export`,
  );
}

function isoOrNull(value: unknown): boolean {
  return value === null || (typeof value === "string" && ISO.test(value));
}

/** Validates one imported key record; `names` tracks names of valid keys seen so far. */
export function checkImportedRecord(
  record: KeyRecord,
  names: Set<string>,
): KeyRecord {
  if (typeof record !== "object" || record === null) fail("no record", null);
  const id = record.id;
  if (!Number.isSafeInteger(id) || id < 1) {
    fail("an id that is not a positive whole number", id);
  }
  if (typeof record.hash !== "string" || !/^[0-9a-f]{64}$/.test(record.hash)) {
    fail("a hash that is not SHA-256 hex", id);
  }
  if (record.status !== "valid" && record.status !== "revoked") {
    fail("an unknown status", id);
  }
  if (typeof record.name !== "string") fail("no name", id);
  if (typeof record.email !== "string") fail("no e-mail", id);
  try {
    normalizeEmail(record.email);
    if (record.status === "valid") {
      const key = nameKey(record.name);
      if (names.has(key)) fail("a name another valid key has", id);
      names.add(key);
    }
  } catch (error) {
    if (
      error instanceof StoreInputError &&
      !error.message.startsWith("the import")
    ) {
      fail(`a bad field (${error.message})`, id);
    }
    throw error;
  }
  for (
    const field of [
      "createdAt",
      "revokedAt",
      "exposedAt",
      "lastUsedAt",
    ] as const
  ) {
    if (!isoOrNull(record[field] ?? null)) fail(`a bad ${field}`, id);
  }
  return {
    id,
    name: record.name,
    email: record.email,
    status: record.status,
    hash: record.hash,
    hint: String(record.hint ?? ""),
    createdAt: record.createdAt,
    revokedAt: record.revokedAt ?? null,
    revokedReason: record.revokedReason ?? null,
    exposedAt: record.exposedAt ?? null,
    exposedFrom: record.exposedFrom ?? null,
    lastUsedAt: record.lastUsedAt ?? null,
  };
}

/** Validates one imported audit line. */
export function checkImportedAudit(entry: AuditEntry): AuditEntry {
  if (
    typeof entry !== "object" || entry === null || !ACTIONS.has(entry.action) ||
    !isoOrNull(entry.at) || entry.at === null ||
    !Number.isSafeInteger(entry.keyId) ||
    typeof entry.actor !== "string"
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
