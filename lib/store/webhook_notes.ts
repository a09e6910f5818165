/**
 * Events raised without an audit line, each once: a key's rate limit used up
 * (once per key per window) and an expiry coming (once per reminder). Each is
 * a usage change whose mark and deliveries commit together, so of several
 * servers noting the same thing, one raises it.
 * @module
 */

import type { ChangeDraft } from "./backend.ts";
import { expiryMs } from "./expiry.ts";

type Quiet = ChangeDraft<"usage">;

const DAY = 86_400_000;

/** Raises `key.rate_limited` for key `id` unless raised in the window holding `at`. */
export async function noteRateLimited(
  draft: Quiet,
  id: number,
  at: Date,
): Promise<boolean> {
  const record = await draft.get(id);
  if (record === null || record.rateLimit === null) return false;
  const windowMs = record.rateLimit.windowSeconds * 1000;
  const window = Math.floor(at.getTime() / windowMs);
  const last = await draft.mark(["rate_limited", id]);
  if (typeof last === "number" && last >= window) return false;
  draft.setMark(["rate_limited", id], window);
  draft.raise({
    type: "key.rate_limited",
    record,
    facts: {
      limit: record.rateLimit.count,
      windowSeconds: record.rateLimit.windowSeconds,
      windowStart: new Date(window * windowMs).toISOString(),
    },
  });
  return true;
}

/** What was reminded of for a key's deadline. */
interface ExpiringMark {
  expiresAt: string;
  days: number[];
}

/**
 * Raises `key.expiring` for key `id` when its deadline is within one of
 * `days` of `now` and that reminder was not sent for this deadline; when
 * several are due at once (a key made with a short lifetime), one event, the
 * nearest, stands for them all. The number of days, or null.
 */
export async function noteExpiring(
  draft: Quiet,
  id: number,
  options: { now: Date; days: readonly number[] },
): Promise<number | null> {
  const record = await draft.get(id);
  if (record === null || record.status !== "valid") return null;
  const left = expiryMs(record) - options.now.getTime();
  if (!(left > 0) || record.expiresAt === null) return null;
  const crossed = options.days.filter((days) => left <= days * DAY);
  if (crossed.length === 0) return null;
  const mark = await draft.mark(["expiring", id]) as ExpiringMark | null;
  const sent = mark?.expiresAt === record.expiresAt ? mark.days : [];
  if (crossed.every((days) => sent.includes(days))) return null;
  const nearest = Math.min(...crossed);
  draft.setMark(
    ["expiring", id],
    {
      expiresAt: record.expiresAt,
      days: [...new Set([...sent, ...crossed])],
    } satisfies ExpiringMark,
  );
  draft.raise({
    type: "key.expiring",
    record,
    facts: { expiresAt: record.expiresAt, daysBefore: nearest },
  });
  return nearest;
}
