/**
 * The rules every store applies alike: what a name, an e-mail, a reason and
 * an audit actor may be, how names are compared, and the one shape of a new,
 * revoked or rotated record, of an audit detail and of an export.
 * @module
 */

import {
  escapeControlCharacters,
  hasControlCharacters,
} from "../util/control_characters.ts";
import { InvalidFieldError } from "./errors.ts";
import { expiryMs, recordAt } from "./expiry.ts";
import type {
  AuditEntry,
  ExportItem,
  KeyRecord,
  KeyStore,
  NewKeyInput,
  RotateOptions,
} from "./types.ts";

/** The highest key id: below 2^31, so ids stay exact everywhere and exports re-import. */
export const MAX_KEY_ID = 2 ** 31 - 1;

/** Every action the audit log records; the compiler holds it to `AuditEntry`. */
export const AUDIT_ACTIONS = Object.keys(
  {
    create: true,
    revoke: true,
    rotate: true,
    expose: true,
    import: true,
    allow_from: true,
    rate_limit: true,
    network: true,
  } satisfies Record<AuditEntry["action"], true>,
) as AuditEntry["action"][];

/** The longest name, in characters (code points after NFC). */
export const NAME_MAX = 64;
/** The longest e-mail address, in UTF-16 units (RFC 5321's 254). */
export const EMAIL_MAX = 254;
/** The longest revocation reason, in characters. */
export const REASON_MAX = 500;
/** The longest audit actor (user@host), in characters. */
export const ACTOR_MAX = 128;
/** The longest refused e-mail address an error carries, in characters. */
const REFUSED_EMAIL_MAX = 80;

/** Checks every name passes, looked up or imported too; a new one also passes normalizeName's. */
function tidyName(name: string): string {
  const tidy = name.normalize("NFC").trim();
  if (tidy === "") throw new InvalidFieldError("name", "empty");
  if ([...tidy].length > NAME_MAX) {
    throw new InvalidFieldError("name", "too_long", { limit: NAME_MAX });
  }
  // deno-lint-ignore no-control-regex
  if (/[\u0000-\u001f\u007f-\u009f]/.test(tidy)) {
    throw new InvalidFieldError("name", "control_characters");
  }
  if (/^\d+$/.test(tidy)) {
    // A key is referred to by id or by name; an all-digit name would be ambiguous.
    throw new InvalidFieldError("name", "all_digits");
  }
  return tidy;
}

/**
 * Checks and tidies a new key name: at most {@linkcode NAME_MAX} characters,
 * not empty, not all digits, no control, bidi or invisible (`INVISIBLE`)
 * characters; throws {@linkcode InvalidFieldError} when unusable.
 */
export function normalizeName(name: string): string {
  const tidy = tidyName(name);
  if (hasControlCharacters(tidy)) {
    throw new InvalidFieldError("name", "control_or_bidi_characters");
  }
  if (INVISIBLE.test(tidy)) {
    throw new InvalidFieldError("name", "invisible_characters");
  }
  return tidy;
}

/**
 * Characters that show as nothing or as a plain space, so that two names
 * that differ by them look the same in every listing and message: format
 * characters (Unicode category Cf: U+200B zero width space, joiners, U+2060,
 * U+FEFF, soft hyphen, tags), the combining grapheme joiner, variation
 * selectors, Hangul fillers, and every space but U+0020.
 */
const INVISIBLE =
  /[\p{Cf}\u034f\u115f\u1160\u3164\uffa0\ufe00-\ufe0f\u{e0100}-\u{e01ef}]|(?! )\p{Z}/u;

/** The form in which names are compared for uniqueness. */
export function nameKey(name: string): string {
  return tidyName(name).toLowerCase();
}

/** Checks an e-mail address: at most {@linkcode EMAIL_MAX}, no spaces, control or bidi characters. */
export function normalizeEmail(email: string): string {
  const tidy = email.trim();
  // Deliberately practical: one @, a dotted domain, no spaces or control characters.
  const ok = tidy.length <= EMAIL_MAX &&
    /^[^\s@\p{Cc}]{1,64}@[^\s@\p{Cc}]+\.[^\s@\p{Cc}.]{2,}$/u.test(tidy) &&
    !tidy.includes("..") && !hasControlCharacters(tidy);
  if (!ok) {
    throw new InvalidFieldError("email", "not_an_address", {
      limit: EMAIL_MAX,
      value: shortened(email, REFUSED_EMAIL_MAX),
    });
  }
  return tidy;
}

/**
 * Checks a revocation reason: at most {@linkcode REASON_MAX} characters, not
 * blank, no control or bidirectional characters (one line, shown as is in
 * listings); throws {@linkcode InvalidFieldError} when unusable.
 */
export function normalizeReason(reason: string): string {
  const tidy = reason.normalize("NFC").trim();
  if (tidy === "") throw new InvalidFieldError("reason", "empty");
  if ([...tidy].length > REASON_MAX) {
    throw new InvalidFieldError("reason", "too_long", { limit: REASON_MAX });
  }
  if (hasControlCharacters(tidy)) {
    throw new InvalidFieldError("reason", "control_or_bidi_characters");
  }
  return tidy;
}

/**
 * Who made a change, as audited. It comes from the environment (USER, host
 * name), which the admin neither types nor should be refused for, so it is
 * made safe: control and bidi characters escaped, cut to {@linkcode ACTOR_MAX}.
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

/** The words of the audit log's details, alike in every store. */
export const AUDIT_DETAIL = {
  /** The replacement id in `rotateKey`'s words (the log's only link); null for any other text. */
  replacementOf: (detail: string | null): number | null => {
    const id = /^replaced by key ([1-9]\d{0,15})(?:; .*)?$/.exec(detail ?? "")
      ?.[1];
    return id === undefined || !Number.isSafeInteger(Number(id))
      ? null
      : Number(id);
  },
  expose: (from: string): string => `sent in a URL from ${from}; rotate it`,
  /** A report's expose line. */
  reported: (from: string): string =>
    `reported as leaked from ${from}; rotate it`,
  /** A report's revocation. */
  reportedReason: (from: string): string => `reported as leaked from ${from}`,
  /** The actor of a report's audit lines, its exposure and its revocation alike. */
  reporter: (from: string): string => `report from ${from}`,
  /** The reason of a key in an overlap retired because its replacement was rotated. */
  chainRotated: (replacementId: number): string =>
    `retired: its replacement, key ${replacementId}, was rotated`,
  /** The reason of a key retired by its replacement's first use. */
  firstUsed: (createdId: number): string =>
    `replaced by key ${createdId}, which was first used`,
};

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
    expiresAt: input.expiresAt ?? null,
    replacedBy: null,
    retires: null,
    rotatedFrom: null,
    rateCounter: null,
    allowFrom: input.allowFrom ?? null,
    rateLimit: input.rateLimit ?? null,
    networks: [],
    refusedUses: [],
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

/** A rotation's two records: the old one revoked now, or valid through its overlap. */
export function rotation(
  current: KeyRecord,
  fresh: KeyRecord,
  options: RotateOptions & { at: Date; predecessor: KeyRecord | null },
): { created: KeyRecord; old: KeyRecord } {
  // The replacement is the same installation's key: neither its network
  // restriction (often rotated after a leak, when it matters most) nor its
  // rate limit, which a rotation must not evade, may fall away. It names
  // the line's first key, so that every live key of the line takes from one
  // line count of 2L besides its own (lineRoot).
  const root = firstOfLine(current, options.predecessor);
  const created = {
    ...fresh,
    allowFrom: current.allowFrom,
    rateLimit: current.rateLimit,
    rotatedFrom: current.id,
    rateCounter: root,
  };
  // A 1.1 record's count (its predecessor's predecessor's) is put right.
  const named = current.rateCounter === null ? current : {
    ...current,
    rateCounter: root,
  };
  const until = options.overlapUntil;
  if (until === undefined) {
    const reason = `rotated: replaced by key ${fresh.id}`;
    // The link both ways, so that an import can check a line's links.
    const old = revokedRecord(named, options.at, reason);
    return { created, old: { ...old, replacedBy: fresh.id } };
  }
  // Valid through the overlap, or until its own lifetime ends if sooner.
  const expiresAt = Date.parse(until) < expiryMs(current)
    ? until
    : current.expiresAt;
  return {
    created: { ...created, retires: options.untilFirstUse ? current.id : null },
    old: { ...named, expiresAt, replacedBy: fresh.id },
  };
}

/**
 * The first key of `record`'s rotation line, whose line count it takes from
 * besides its own; null for a key never rotated (its own count only). A
 * record of 1.1 may name its predecessor's predecessor's count instead, and
 * its first replacement names none (it was rotated from the first key).
 */
export function lineRoot(
  record: Pick<KeyRecord, "id" | "rateCounter" | "rotatedFrom" | "replacedBy">,
): number | null {
  if (record.rateCounter !== null) return record.rateCounter;
  if (record.rotatedFrom !== null) return record.rotatedFrom;
  return record.replacedBy === null ? null : record.id;
}

/**
 * The first key of the line that `current` (rotated from `predecessor`)
 * belongs to: the lowest id of those the two records link to, as ids grow
 * along a line. Exact for lines written by 1.1 too, whose keys alternate
 * between the first key and the second as their count.
 */
function firstOfLine(
  current: KeyRecord,
  predecessor: KeyRecord | null,
): number {
  let first = current.id;
  for (
    const id of [
      current.rotatedFrom,
      current.rateCounter,
      predecessor?.rateCounter ?? null,
    ]
  ) if (id !== null && id < first) first = id;
  return first;
}

/**
 * The key a rotation of `current` retires at once: its predecessor, still valid
 * in the overlap of the rotation that made `current`. Left valid, a line of
 * rotations would keep any number of keys working, each with its own limit.
 */
export function overlappedPredecessor(
  current: KeyRecord,
  predecessor: KeyRecord | null,
): KeyRecord | null {
  return predecessor !== null && predecessor.status === "valid" &&
      predecessor.replacedBy === current.id
    ? predecessor
    : null;
}

/**
 * The other key of `record`'s rotation line that works at `now`, in the
 * overlap of the rotation between them, given `other` as read by
 * {@linkcode partnerId}; else null. Both share one rate limit (`limitKey`).
 */
export function overlapPartner(
  record: KeyRecord,
  other: KeyRecord | null,
  now: number,
): KeyRecord | null {
  if (other === null || recordAt(record, now).status !== "valid") return null;
  const linked = other.rotatedFrom === record.id ||
    other.replacedBy === record.id;
  return linked && recordAt(other, now).status === "valid" ? other : null;
}

/** The key to read for {@linkcode overlapPartner}: the replacement, else the predecessor. */
export function partnerId(
  record: Pick<KeyRecord, "replacedBy" | "rotatedFrom">,
): number | null {
  return record.replacedBy ?? record.rotatedFrom;
}

/** The record without its hash, as the console shows it. */
export function publicRecord(
  record: KeyRecord,
): Omit<KeyRecord, "hash" | "rateCounter"> {
  // The line a key counts with is bookkeeping, kept by exports only.
  const { hash: _hash, rateCounter: _counter, ...rest } = record;
  return rest;
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
