/**
 * Every change to a key, written once for every backend: each reads what it
 * needs through the draft of one change (lib/store/backend.ts), decides by the
 * rules of `records.ts` and `usage_lists.ts`, and writes records and audit
 * lines into it; the backend commits it atomically or reruns the change on
 * fresh reads. A draft's type says what it alters, so a usage note cannot
 * write a revocation's audit line, nor a revocation run as a usage note.
 * @module
 */

import { networkKey } from "../net/client_address.ts";
import type { ChangeDraft } from "./backend.ts";
import type { Alters } from "./change.ts";
import {
  InvalidFieldError,
  KeyCollisionError,
  KeyNotFoundError,
  NameTakenError,
  RotateRetiringError,
  RotateRevokedError,
} from "./errors.ts";
import { recordAt } from "./expiry.ts";
import {
  AUDIT_DETAIL,
  newRecord,
  normalizeEmail,
  normalizeName,
  overlapPartner,
  overlappedPredecessor,
  partnerId,
  revokedRecord,
  rotation,
} from "./records.ts";
import {
  allowFromDetail,
  appendRefused,
  mergeNetworks,
  normalizeAllowFrom,
} from "./usage_lists.ts";
import { rateLimitDetail, storedRateLimit } from "./rate_limits.ts";
import type {
  ChangeOptions,
  ExposeOptions,
  KeyRecord,
  NewKeyInput,
  RateLimit,
  RetireOptions,
  RevokeOptions,
  RevokeResult,
  RotateOptions,
  RotateResult,
} from "./types.ts";

type Authenticating = ChangeDraft<"authentication">;
type Quiet = ChangeDraft<"usage">;

/** Stores a new valid key under the next id; its name must be free. */
export async function createKey(
  draft: Authenticating,
  input: NewKeyInput,
  options: ChangeOptions,
): Promise<KeyRecord> {
  const name = normalizeName(input.name);
  const email = normalizeEmail(input.email);
  const allowFrom = input.allowFrom
    ? normalizeAllowFrom(input.allowFrom)
    : null;
  const rateLimit = checkedRateLimit(input.rateLimit ?? null);
  const holder = await draft.nameHolder(name);
  if (holder !== null) throw new NameTakenError(name, holder);
  if (await draft.hashTaken(input.hash)) throw new KeyCollisionError();
  const record = newRecord(
    await draft.nextId(),
    { ...input, name, email, allowFrom, rateLimit },
    draft.at,
  );
  draft.insert(record);
  const details = [
    ...(allowFrom === null ? [] : [allowFromDetail(allowFrom)]),
    ...(rateLimit === null ? [] : [rateLimitDetail(rateLimit)]),
  ];
  draft.audit({
    action: "create",
    keyId: record.id,
    actor: options.actor,
    detail: details.length === 0 ? null : details.join("; "),
  });
  return record;
}

/** Revokes key `id`; a revoked key is left as it is. */
export async function revokeKey(
  draft: Authenticating,
  id: number,
  options: RevokeOptions,
): Promise<RevokeResult> {
  const current = await stored(draft, id);
  if (current.status === "revoked") return { record: current, changed: false };
  const record = revokedRecord(current, draft.at, options.reason);
  draft.update(record);
  draft.audit({
    action: "revoke",
    keyId: id,
    actor: options.actor,
    detail: options.reason ?? null,
  });
  return { record, changed: true };
}

/**
 * Replaces key `id` by a new key of the same name and e-mail: the old one
 * revoked now, or kept through an overlap (and, with `untilFirstUse`,
 * retired by its replacement's first use).
 */
export async function rotateKey(
  draft: Authenticating,
  id: number,
  options: RotateOptions & {
    replacement: Pick<NewKeyInput, "hash" | "hint" | "expiresAt">;
  },
): Promise<RotateResult> {
  const { replacement, ...rotate } = options;
  const current = await stored(draft, id);
  if (current.status === "revoked") throw new RotateRevokedError(id);
  // A key rotated with an overlap is on its way out: rotate its replacement.
  if (current.replacedBy !== null) {
    throw new RotateRetiringError(id, current.replacedBy);
  }
  if (await draft.hashTaken(replacement.hash)) throw new KeyCollisionError();
  const predecessor = current.rotatedFrom === null
    ? null
    : await draft.get(current.rotatedFrom);
  const fresh = newRecord(await draft.nextId(), {
    ...replacement,
    name: current.name,
    email: current.email,
  }, draft.at);
  const { created, old } = rotation(current, fresh, {
    at: draft.at,
    predecessor,
    ...rotate,
  });
  // At most two keys of a line at once: the one `current` replaced goes now.
  const overlapped = overlappedPredecessor(current, predecessor);
  const retired = overlapped === null
    ? null
    : revokedRecord(overlapped, draft.at, AUDIT_DETAIL.chainRotated(id));
  if (retired !== null) {
    draft.update(retired);
    draft.audit({
      action: "revoke",
      keyId: retired.id,
      actor: rotate.actor,
      detail: retired.revokedReason,
    });
  }
  // The old key first: it gives up the name the new one takes.
  draft.update(old);
  draft.insert(created);
  draft.audit({
    action: "rotate",
    keyId: id,
    actor: rotate.actor,
    detail: `replaced by key ${created.id}` +
      (rotate.overlapUntil === undefined
        ? ""
        : `; the old key works until ${rotate.overlapUntil}${
          rotate.untilFirstUse ? ` or key ${created.id}'s first use` : ""
        }`),
  });
  return { revoked: old, created, retired };
}

/** Writes the revocation a deadline, or (`first_use`) a replacement's first use, decided. */
export async function retireKey(
  draft: Authenticating,
  id: number,
  options: RetireOptions,
): Promise<RevokeResult> {
  const self = await stored(draft, id);
  const firstUse = options.cause === "first_use";
  const targetId = firstUse ? self.retires : id;
  const unchanged = { record: self, changed: false };
  if (targetId === null) return unchanged;
  const target = targetId === id ? self : await draft.get(targetId);
  // The link is spent whatever became of the old key, so the write
  // happens once.
  if (firstUse) draft.update({ ...self, retires: null });
  // Revoked as its deadline already decided, or now at the first use.
  const lapsed = target?.status === "valid"
    ? recordAt(target, draft.at.getTime())
    : null;
  const record = lapsed?.status === "revoked"
    ? lapsed
    : lapsed && firstUse
    ? revokedRecord(lapsed, draft.at, AUDIT_DETAIL.firstUsed(id))
    : null;
  if (!record) return unchanged;
  draft.update(record);
  draft.audit({
    action: "revoke",
    keyId: record.id,
    actor: options.actor,
    detail: record.revokedReason,
  });
  return { record, changed: true };
}

/** Sets (or with null clears) the networks key `id` may be used from. */
export async function restrictKey(
  draft: Authenticating,
  id: number,
  options: ChangeOptions & { allowFrom: string[] | null },
): Promise<{ record: KeyRecord; changed: boolean }> {
  const wanted = options.allowFrom === null
    ? null
    : normalizeAllowFrom(options.allowFrom);
  const current = await stored(draft, id);
  const record = { ...current, allowFrom: wanted };
  if (JSON.stringify(current.allowFrom) === JSON.stringify(wanted)) {
    return { record, changed: false };
  }
  draft.update(record);
  draft.audit({
    action: "allow_from",
    keyId: id,
    actor: options.actor,
    detail: allowFromDetail(wanted),
  });
  return { record, changed: true };
}

/**
 * Sets (or with null lifts) key `id`'s rate limit, and its line partner's:
 * a line has one limit. The partner is the other key of its rotation still
 * valid in an overlap (its replacement, or the key it replaced), whose
 * requests count on the line with this key's; left at its own limit, the
 * line's would be sized from whichever key asks, and one key's traffic
 * could spend the other's budget. It alters what a request gets, so it is
 * an authentication change: every server drops the cached records before
 * it returns, and applies the new limit from the next request.
 */
export async function limitKey(
  draft: Authenticating,
  id: number,
  options: ChangeOptions & { rateLimit: RateLimit | null },
): Promise<{ record: KeyRecord; changed: boolean; partner: KeyRecord | null }> {
  const wanted = checkedRateLimit(options.rateLimit);
  const current = await stored(draft, id);
  const other = partnerId(current);
  const found = overlapPartner(
    current,
    other === null ? null : await draft.get(other),
    draft.at.getTime(),
  );
  const records = [current, ...(found === null ? [] : [found])];
  let partner: KeyRecord | null = null;
  // A partner at another limit (a 1.1 or imported line) is a change too.
  let changed = false;
  for (const each of records) {
    // Both in their stored shape, fields in one order.
    if (JSON.stringify(each.rateLimit) === JSON.stringify(wanted)) continue;
    const record = { ...each, rateLimit: wanted };
    draft.update(record);
    draft.audit({
      action: "rate_limit",
      keyId: each.id,
      actor: options.actor,
      detail: rateLimitDetail(wanted),
    });
    changed = true;
    if (each !== current) partner = record;
  }
  return { record: { ...current, rateLimit: wanted }, changed, partner };
}

/** A limit in its stored shape; one out of range is refused, never dropped. */
function checkedRateLimit(limit: RateLimit | null): RateLimit | null {
  if (limit === null) return null;
  const checked = storedRateLimit(limit);
  if (checked === null) {
    throw new InvalidFieldError("rateLimit", "out_of_range");
  }
  return checked;
}

/**
 * Marks key `id` exposed; true when this call wrote an audit line. Seen in a
 * URL: once. Reported: each report of a valid key is news (someone found it
 * where anyone may), but the record keeps its first exposure.
 */
export async function exposeKey(
  draft: Quiet,
  id: number,
  options: ExposeOptions,
): Promise<boolean> {
  const current = await stored(draft, id);
  const reported = options.source === "report";
  // A key past its end is revoked, whether or not written so yet.
  const valid = recordAt(current, draft.at.getTime()).status === "valid";
  if (reported ? !valid : current.exposedAt !== null) {
    return false;
  }
  // The first exposure is kept; a later one is an audit line alone.
  if (current.exposedAt === null) {
    draft.update({
      ...current,
      exposedAt: draft.at.toISOString(),
      exposedFrom: options.from,
    });
  }
  draft.audit({
    action: "expose",
    keyId: id,
    actor: options.actor,
    detail: reported
      ? AUDIT_DETAIL.reported(options.from)
      : AUDIT_DETAIL.expose(options.from),
  }, { source: options.source ?? "url", from: options.from });
  return true;
}

/** Merges a key's network uses into its bounded list; returns (and audits) the new ones. */
export async function noteNetworks(
  draft: Quiet,
  id: number,
  uses: Iterable<{ network: string; at: Date }>,
): Promise<string[]> {
  const lists = await draft.usage(id);
  if (lists === null) return [];
  const merged = mergeNetworks(lists.networks, uses);
  draft.putUsage(id, { networks: merged.networks });
  for (const network of merged.added) {
    draft.audit({
      action: "network",
      keyId: id,
      actor: "server",
      detail: `first used from ${network}`,
    }, { network });
  }
  return merged.added;
}

/**
 * Appends one key's refused uses to its bounded list: no audit line. Raises
 * one `key.refused_network` naming the networks not among the uses kept.
 */
export async function noteRefused(
  draft: Quiet,
  id: number,
  uses: Iterable<{ address: string; at: Date }>,
): Promise<void> {
  const lists = await draft.usage(id);
  if (lists === null) return;
  const added = [...uses];
  draft.putUsage(id, { refused: appendRefused(lists.refused, added) });
  const known = new Set(lists.refused.map((use) => networkKey(use.address)));
  const networks = [
    ...new Set(added.map((use) => networkKey(use.address))),
  ].filter((network) => !known.has(network));
  const record = networks.length > 0 ? await draft.get(id) : null;
  if (record !== null) {
    draft.raise({ type: "key.refused_network", record, facts: { networks } });
  }
}

async function stored(
  draft: ChangeDraft<Alters>,
  id: number,
): Promise<KeyRecord> {
  const record = await draft.get(id);
  if (record === null) throw new KeyNotFoundError(id);
  return record;
}
