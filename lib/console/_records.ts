/**
 * One key record: found by id or name, named in messages, shown with state colours.
 *
 * @module
 */

import { formatRate } from "../auth/rate_limit.ts";
import { KeyNotFoundError } from "../store/errors.ts";
import { recordAt } from "../store/expiry.ts";
import { publicRecord } from "../store/records.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";
import type { Context } from "./command.ts";
import { paint, relativeTime, type Tone } from "./_format.ts";
import { jsonText, visible } from "./_output.ts";

/** A key by id (all digits) or by name (valid keys only). */
export async function resolve(
  store: KeyStore,
  ref: string,
): Promise<KeyRecord> {
  const found = /^\d+$/.test(ref)
    ? await store.get(Number(ref))
    : await store.getByName(ref);
  // As the server sees it now: a key past its deadline is revoked.
  const record = found && recordAt(found, Date.now());
  if (record === null) {
    throw new KeyNotFoundError(/^\d+$/.test(ref) ? Number(ref) : ref);
  }
  return record;
}

const TIME_FIELDS = new Set([
  "createdAt",
  "revokedAt",
  "exposedAt",
  "lastUsedAt",
  "expiresAt",
]);

/** A record on stdout: JSON, or a field a line; `extra` adds JSON-only fields (the store). */
export function printRecord(
  ctx: Context,
  record: KeyRecord,
  extra: Record<string, unknown> = {},
): void {
  if (ctx.json) {
    ctx.out.line(jsonText({ ...publicRecord(record), ...extra }));
    return;
  }
  for (const [field, value] of Object.entries(publicRecord(record))) {
    const lines = usageLines(field, record, ctx.now);
    if (lines !== null) {
      lines.forEach((line, i) =>
        ctx.out.line(`${(i === 0 ? field : "").padEnd(14)}${line}`.trimEnd())
      );
      continue;
    }
    let text = value === null ? "" : visible(String(value));
    if (
      (field === "lastUsedAt" || field === "expiresAt") && value === null
    ) text = "never";
    else if (TIME_FIELDS.has(field) && typeof value === "string") {
      text = `${value} (${relativeTime(value, { now: ctx.now })})`;
    }
    const tone = ctx.colour ? recordTone(record, field) : undefined;
    // Only the status and the exposure are coloured here: a dim page is hard to read.
    const shown = tone === "dim" ? text : tinted(text, tone);
    ctx.out.line(`${field.padEnd(14)}${shown}`.trimEnd());
  }
}

/** The lines of a usage field (where a key may be, was, or was refused), or null for any other field. */
function usageLines(
  field: string,
  record: KeyRecord,
  now: number,
): string[] | null {
  const at = (iso: string) => `${iso} (${relativeTime(iso, { now })})`;
  switch (field) {
    case "allowFrom":
      return [record.allowFrom?.map(visible).join(", ") ?? "anywhere"];
    case "rateLimit":
      return [
        record.rateLimit === null
          ? "none"
          : `${formatRate(record.rateLimit)} (shared by every server)`,
      ];
    case "networks":
      return record.networks.length === 0
        ? ["none seen yet"]
        : record.networks.map((n) =>
          `${visible(n.network)} first ${at(n.firstSeenAt)}, last ${
            at(n.lastSeenAt)
          }`
        );
    case "refusedUses":
      return record.refusedUses.length === 0
        ? ["none"]
        : record.refusedUses.map((u) => `${visible(u.address)} at ${at(u.at)}`);
  }
  return null;
}

/** Revoked keys recede; a key seen in a URL stands out, as it should be rotated. */
export function recordTone(record: KeyRecord, field: string): Tone | undefined {
  const status = field === "STATUS" || field === "status";
  if (record.status === "revoked") return status ? "red" : "dim";
  const exposed = field === "EXPOSED" || field === "exposedAt" ||
    field === "exposedFrom";
  if (record.exposedAt !== null && (status || exposed)) return "yellow";
  return undefined;
}

export function tinted(text: string, tone: Tone | undefined): string {
  return tone === undefined ? text : paint(text, tone);
}

/** A key as a question names it: id, name and e-mail. */
export function describe(record: KeyRecord): string {
  return `${named(record)} (${visible(record.email)})`;
}

/** A key as messages name it: its id and its name, quoted and made harmless. */
export function named(record: KeyRecord): string {
  return `${record.id} "${visible(record.name)}"`;
}

/** An overlap key's pending retirement as one line (when, what ends it sooner); else null. */
export async function pendingRetirement(
  store: KeyStore,
  record: KeyRecord,
): Promise<string | null> {
  if (record.status !== "valid" || record.replacedBy === null) return null;
  const replacement = await store.get(record.replacedBy);
  const firstUse = replacement?.status === "valid" &&
    replacement.retires === record.id;
  return `revoked at ${record.expiresAt}${
    firstUse ? ` or at key ${record.replacedBy}'s first use` : ""
  }, replaced by key ${record.replacedBy}`;
}

/** Console advice (`"keys revoke 2"`), each word shell-quoted if needed, to copy as it stands. */
export function advice(words: string[]): string {
  return `"keys ${words.map(shellWord).join(" ")}"`;
}

function shellWord(word: string): string {
  if (/^[A-Za-z0-9@%+=:,./_-]+$/.test(word)) return word;
  return visible(`'${word.replaceAll("'", `'\\''`)}'`);
}

/**
 * What to run instead of changing a revoked key: `verb` on the valid key now
 * carrying its name, else `create` of a new key; `also` added to either.
 */
export async function insteadOfRevoked(
  store: KeyStore,
  target: KeyRecord,
  options: { verb: string; also?: string[] },
): Promise<string> {
  const also = options.also ?? [];
  const found = await store.getByName(target.name);
  const holder = found && found.id !== target.id
    ? recordAt(found, Date.now())
    : null;
  return holder?.status === "valid"
    ? `key ${holder.id} has its name now: ${options.verb} that one with ${
      advice([options.verb, String(holder.id), ...also])
    }`
    : `create the installation a new key with ${
      advice([
        "create",
        "--name",
        target.name,
        "--email",
        target.email,
        ...also,
      ])
    }`;
}

/**
 * The newest key of the rotation line from `record` (in an overlap); `valid`
 * is false when it ends in a revoked or missing key, which nothing can rotate.
 */
export async function newestOfLine(
  store: KeyStore,
  record: KeyRecord,
): Promise<{ record: KeyRecord; valid: boolean }> {
  const seen = new Set<number>([record.id]);
  let current = record;
  while (current.replacedBy !== null && !seen.has(current.replacedBy)) {
    seen.add(current.replacedBy);
    const next = await store.get(current.replacedBy);
    if (next === null) return { record: current, valid: false };
    current = recordAt(next, Date.now());
    if (current.status !== "valid") return { record: current, valid: false };
  }
  return { record: current, valid: current.replacedBy === null };
}
