/**
 * The store interface: everything the server and the admin console need of
 * the place where key records live, and the rules every store enforces alike.
 *
 * The server and the console only ever see {@linkcode KeyStore}; which store
 * backs it is decided once, in {@linkcode openStore}.
 *
 * @module
 */

import type { StoreLocation } from "./config.ts";
import {
  escapeControlCharacters,
  hasControlCharacters,
} from "./_control_characters.ts";

/** The two states of the specification: usable, or revoked for good. */
export type KeyStatus = "valid" | "revoked";

/** Everything kept about one key. The key itself is never part of it. */
export interface KeyRecord {
  /** 1, 2, 3 …: reported to the caller as `apiKeyId`. */
  id: number;
  /** Unique among valid keys, so the list stays readable. */
  name: string;
  /** The integrator's registration. */
  email: string;
  status: KeyStatus;
  /** SHA-256 of the key, hex. */
  hash: string;
  /** Prefix and last four characters, to recognise the key by. */
  hint: string;
  createdAt: string;
  revokedAt: string | null;
  revokedReason: string | null;
  /** When the key was first seen in a URL, where anyone along the way may have logged it. */
  exposedAt: string | null;
  /** The client address that sent it in the URL. */
  exposedFrom: string | null;
  /**
   * When the key last authenticated a request, to the minute; filled in by
   * `get()` and `list()` only, as it is written apart from the record.
   */
  lastUsedAt: string | null;
}

/** What the admin supplies for a new key, plus the hash of the generated secret. */
export interface NewKeyInput {
  name: string;
  email: string;
  hash: string;
  hint: string;
}

/** One line of the audit log. */
export interface AuditEntry {
  at: string;
  action: "create" | "revoke" | "rotate" | "expose" | "import";
  keyId: number;
  /** Who did it: OS user and host for the console. */
  actor: string;
  detail: string | null;
}

/** Who performs a change, for the audit log. */
export interface ChangeOptions {
  actor: string;
}

/** Options of {@linkcode KeyStore.revoke}. */
export interface RevokeOptions extends ChangeOptions {
  reason?: string;
}

/** Options of {@linkcode KeyStore.markExposed}. */
export interface ExposeOptions extends ChangeOptions {
  /** The client address the key came from. */
  from: string;
}

/** One line of a backup: a key record or an audit line, in store order. */
export type ExportItem =
  | { type: "key"; record: KeyRecord }
  | { type: "audit"; entry: AuditEntry };

/** The result of a revocation: `changed` is false when the key was already revoked. */
export interface RevokeResult {
  record: KeyRecord;
  changed: boolean;
}

/** The result of a rotation: the revoked key and its replacement. */
export interface RotateResult {
  revoked: KeyRecord;
  created: KeyRecord;
}

/**
 * The store contract. Every change is atomic (the whole change and its audit
 * line, or nothing) and every read is strongly consistent, so a revocation
 * holds for the very next request in every process sharing the store.
 */
export interface KeyStore {
  /** The record whose hash matches, valid or revoked; null when none. */
  findByHash(hash: string): Promise<KeyRecord | null>;
  /** The record with this id, valid or revoked; null when none. */
  get(id: number): Promise<KeyRecord | null>;
  /** The valid key with this name (names are compared case-insensitively). */
  getByName(name: string): Promise<KeyRecord | null>;
  /** Records in id order, streamed; valid ones only unless `includeRevoked`. */
  list(options?: { includeRevoked?: boolean }): AsyncIterable<KeyRecord>;
  /** Stores a new valid key under the next id. */
  create(input: NewKeyInput, options: ChangeOptions): Promise<KeyRecord>;
  /** Revokes a key; revoking a revoked key changes nothing. */
  revoke(id: number, options: RevokeOptions): Promise<RevokeResult>;
  /** Revokes a key and stores its replacement, same name and e-mail, in one step. */
  rotate(
    id: number,
    replacement: Pick<NewKeyInput, "hash" | "hint">,
    options: ChangeOptions,
  ): Promise<RotateResult>;
  /** The audit log, oldest first, streamed. */
  audit(options?: { keyId?: number }): AsyncIterable<AuditEntry>;
  /**
   * The sequence number of the last change. Any change to any record moves
   * it, so a cache that saw revision R is current while the store is still at R.
   */
  revision(): Promise<bigint>;
  /**
   * `findByHash()` together with the revision the record was read at, in one
   * consistent read: the pair a cache needs.
   */
  findByHashAt(
    hash: string,
  ): Promise<{ record: KeyRecord | null; revision: bigint }>;
  /**
   * Marks a key as exposed in a URL; only the first exposure is recorded (and
   * audited). Returns true when this call marked it. The key stays valid.
   */
  markExposed(id: number, options: ExposeOptions): Promise<boolean>;
  /** Records when keys were last used. Best effort: no audit line, no revision. */
  recordLastUsed(uses: Iterable<{ id: number; at: Date }>): Promise<void>;
  /** Every key record (hashes, never keys) and audit line, for a backup. */
  exportAll(): AsyncIterable<ExportItem>;
  /**
   * Restores an export into an empty store, then audits the import. Refuses
   * a store that is not empty, and leaves nothing half-written on failure.
   */
  importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<{ keys: number; audit: number }>;
  /**
   * Every key, valid and revoked, with an id above `afterId`, in id order and
   * streamed in batches: what an in-memory index of the keys is built from.
   * Yields nothing while an import is unfinished, as no key authenticates then.
   */
  keyHashes(options?: { afterId?: number }): AsyncIterable<{
    id: number;
    hash: string;
  }>;
  /**
   * The revision at which the set of keys was last replaced wholesale (an
   * import began, completed, failed or was aborted); 0n if never. An index
   * built at revision R must rebuild from scratch once this exceeds R, as
   * ids may then have been reused.
   */
  importRevision(): Promise<bigint>;
  /**
   * Ends an import that is unfinished (interrupted, or still running in
   * another process, which then fails): empties the store as it was before
   * the import. Returns false when no import was unfinished.
   */
  abortImport(options: ChangeOptions): Promise<boolean>;
  /** Releases the store. */
  close(): Promise<void>;
}

/** The admin-supplied field an input error is about. */
export type InputField = "name" | "email" | "reason";

/** A request the store refuses; its message is meant for the admin as is. */
export class StoreInputError extends Error {
  override name = "StoreInputError";
  /** The field at fault when the error is about one, so callers need not read the message. */
  readonly field: InputField | undefined;

  constructor(message: string, options: { field?: InputField } = {}) {
    super(message);
    this.field = options.field;
  }
}

/** Why an import cannot go on; see {@linkcode ImportStateError}. */
export type ImportStateCode = "import-unfinished" | "import-aborted";

/**
 * The store is in the middle of an import, or the import this call was
 * running was aborted from elsewhere. `import-unfinished`: another import
 * runs or one was interrupted, and every change is refused until it ends.
 * `import-aborted`: `keys import --abort` ended this import.
 */
export class ImportStateError extends StoreInputError {
  override name = "ImportStateError";
  readonly code: ImportStateCode;

  constructor(code: ImportStateCode) {
    super(
      code === "import-unfinished"
        ? 'An import into this store is running or was interrupted, and no key works until it ends; wait for it, or if none is running, run "keys import --abort" to empty the store and then import again'
        : 'The import was aborted by "keys import --abort" and nothing of it remains; run the import again',
    );
    this.code = code;
  }
}

/** No key has the id or name asked for. */
export class KeyNotFoundError extends StoreInputError {
  override name = "KeyNotFoundError";
}

/** The error for a key id or name that matches no key, worded for the admin. */
export function keyNotFound(ref: number | string): KeyNotFoundError {
  return new KeyNotFoundError(
    typeof ref === "number"
      ? `Key ${ref} does not exist; run "keys list --all" to see the keys`
      : `No valid key is named ${
        JSON.stringify(ref)
      }; run "keys list" to see the names`,
  );
}

/** The error for a name a valid key already has, worded for the admin. */
export function nameTaken(name: string, id: number): StoreInputError {
  return new StoreInputError(
    `Name ${
      JSON.stringify(name)
    } is already used by valid key ${id}; choose another name or revoke key ${id} first`,
  );
}

/** The error for rotating a key that is already revoked. */
export function cannotRotateRevoked(id: number): StoreInputError {
  return new StoreInputError(
    `Key ${id} is revoked; create a new key instead of rotating it`,
  );
}

/**
 * The highest key id: below 2^31, so that ids stay exact wherever they are
 * counted and every store's export can be imported again.
 */
export const MAX_KEY_ID = 2 ** 31 - 1;

/** The error for a store that has handed out every id up to {@linkcode MAX_KEY_ID}. */
export function keyIdsExhausted(): StoreInputError {
  return new StoreInputError(
    `Key ids have reached ${MAX_KEY_ID}, the highest there is; move the keys to a new store with "keys export" and an edited import`,
  );
}

/** The error for a generated key whose hash is already stored (practically never). */
export function keyCollision(): StoreInputError {
  return new StoreInputError("Generated key collides; run the command again");
}

/** The words of the audit log's details, alike in every store. */
export const AUDIT_DETAIL = {
  rotate: (createdId: number): string => `replaced by key ${createdId}`,
  expose: (from: string): string => `sent in a URL from ${from}; rotate it`,
};

/** The record as revoked by a rotation that replaced it with key `createdId`. */
export function rotatedRecord(
  record: KeyRecord,
  at: Date,
  createdId: number,
): KeyRecord {
  return revokedRecord(record, at, `rotated: replaced by key ${createdId}`);
}

/** The store could not be reached or read: the caller should retry later, not drop its key. */
export class StoreUnavailableError extends Error {
  override name = "StoreUnavailableError";
}

/** The longest name, in characters (code points after NFC). */
export const NAME_MAX = 64;
/** The longest e-mail address, in UTF-16 units (RFC 5321's 254). */
export const EMAIL_MAX = 254;
/** The longest revocation reason, in characters. */
export const REASON_MAX = 500;
/** The longest audit actor (user@host), in characters. */
export const ACTOR_MAX = 128;

/**
 * The checks a stored name already passed: the name's identity for the
 * uniqueness index must never fail on a record the store holds, so the
 * rules added since (no bidirectional controls) live in normalizeName only.
 */
function tidyName(name: string): string {
  const tidy = name.normalize("NFC").trim();
  if (tidy === "") {
    throw new StoreInputError(
      "Name must not be empty; name the installation",
      { field: "name" },
    );
  }
  if ([...tidy].length > NAME_MAX) {
    throw new StoreInputError(
      `Name must be at most ${NAME_MAX} characters; shorten it`,
      { field: "name" },
    );
  }
  // deno-lint-ignore no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(tidy)) {
    throw new StoreInputError("Name must not contain control characters", {
      field: "name",
    });
  }
  if (/^\d+$/.test(tidy)) {
    // A key is referred to by id or by name; an all-digit name would be ambiguous.
    throw new StoreInputError(
      "Name must not be all digits, as digits refer to a key id",
      { field: "name" },
    );
  }
  return tidy;
}

/**
 * Checks and tidies a new key name: at most {@linkcode NAME_MAX} characters,
 * not empty, not all digits, no control or bidirectional characters; throws
 * {@linkcode StoreInputError} when unusable.
 */
export function normalizeName(name: string): string {
  const tidy = tidyName(name);
  if (hasControlCharacters(tidy)) {
    throw new StoreInputError(
      "Name must not contain control or bidirectional characters",
      { field: "name" },
    );
  }
  return tidy;
}

/** The form in which names are compared for uniqueness. */
export function nameKey(name: string): string {
  return tidyName(name).toLowerCase();
}

/**
 * Checks an e-mail address: at most {@linkcode EMAIL_MAX} characters, no
 * spaces, control or bidirectional characters; throws
 * {@linkcode StoreInputError} when unusable.
 */
export function normalizeEmail(email: string): string {
  const tidy = email.trim();
  // Deliberately practical: one @, a dotted domain, no spaces or control characters.
  const ok = tidy.length <= EMAIL_MAX &&
    /^[^\s@\p{Cc}]{1,64}@[^\s@\p{Cc}]+\.[^\s@\p{Cc}.]{2,}$/u.test(tidy) &&
    !tidy.includes("..") && !hasControlCharacters(tidy);
  if (!ok) {
    throw new StoreInputError(
      `Email must be an address such as ops@example.com of at most ${EMAIL_MAX} characters, not ${
        // The refused value is shown, but never as the terminal would act on it.
        escapeControlCharacters(JSON.stringify(shortened(email, 80)))}`,
      { field: "email" },
    );
  }
  return tidy;
}

/**
 * Checks a revocation reason: at most {@linkcode REASON_MAX} characters, not
 * blank, no control or bidirectional characters (one line, shown as is in
 * listings); throws {@linkcode StoreInputError} when unusable.
 */
export function normalizeReason(reason: string): string {
  const tidy = reason.normalize("NFC").trim();
  if (tidy === "") {
    throw new StoreInputError(
      "Reason must not be empty; say why, or leave the reason out",
      { field: "reason" },
    );
  }
  if ([...tidy].length > REASON_MAX) {
    throw new StoreInputError(
      `Reason must be at most ${REASON_MAX} characters; shorten it`,
      { field: "reason" },
    );
  }
  if (hasControlCharacters(tidy)) {
    throw new StoreInputError(
      "Reason must not contain control or bidirectional characters; write it on one line",
      { field: "reason" },
    );
  }
  return tidy;
}

/**
 * Who made a change, as the audit log keeps it. It comes from the
 * environment (USER, the host name), which the admin does not type and
 * should not be refused for, so it is made safe instead: control and
 * bidirectional characters escaped, cut to {@linkcode ACTOR_MAX} characters.
 */
export function normalizeActor(actor: string): string {
  return shortened(escapeControlCharacters(actor.trim()), ACTOR_MAX) ||
    "unknown";
}

/** Text cut to `max` characters, the last one an ellipsis when cut. */
function shortened(text: string, max: number): string {
  const chars = [...text];
  return chars.length <= max ? text : chars.slice(0, max - 1).join("") + "…";
}

/** A new valid record: the one shape every store creates. */
export function newRecord(id: number, input: NewKeyInput, at: Date): KeyRecord {
  return {
    id,
    name: input.name,
    email: input.email,
    status: "valid",
    hash: input.hash,
    hint: input.hint,
    createdAt: at.toISOString(),
    revokedAt: null,
    revokedReason: null,
    exposedAt: null,
    exposedFrom: null,
    lastUsedAt: null,
  };
}

/** The record as revoked now: the one way every store revokes. */
export function revokedRecord(
  record: KeyRecord,
  at: Date,
  reason?: string,
): KeyRecord {
  return {
    ...record,
    status: "revoked",
    revokedAt: at.toISOString(),
    revokedReason: reason ?? null,
  };
}

/** Every key record, then every audit line: the backup format of every store. */
export async function* exportItems(
  store: Pick<KeyStore, "list" | "audit">,
): AsyncIterable<ExportItem> {
  for await (const record of store.list({ includeRevoked: true })) {
    yield { type: "key", record };
  }
  for await (const entry of store.audit()) yield { type: "audit", entry };
}

/** The record without its hash, as the console shows it. */
export function publicRecord(record: KeyRecord): Omit<KeyRecord, "hash"> {
  const { hash: _hash, ...rest } = record;
  return rest;
}

/** Opens the store the configuration names. */
export async function openStore(location: StoreLocation): Promise<KeyStore> {
  if (location.kind === "kv") {
    const { openKvStore } = await import("./kv_store.ts");
    return await openKvStore(location.path);
  }
  if (location.kind === "postgres") {
    // Loaded only here, so that the KV path never loads the driver.
    const { openPostgresStore } = await import("./postgres_store.ts");
    return await openPostgresStore(location.url);
  }
  const unknown: never = location;
  throw new StoreInputError(
    `Store kind ${(unknown as { kind: string }).kind} is not supported`,
  );
}
