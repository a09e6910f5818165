/**
 * The share ledger's plain steps (lib/auth/share_ledger.ts): how long a
 * request past its share may be held, the record every server holds
 * without one, a share's drift back to even, and what a refusal says.
 * @module
 */

import type { RateDecision, RateLimit } from "./rate_limit.ts";
import { PEERS_POLL_MS, shareOf } from "./peers.ts";
import { type ShareRecord, sumOf } from "../store/rate_shares.ts";
import { LEASE_MARGIN_MS, LEASE_MS } from "../store/registrations.ts";
import { StoreUnavailableError } from "../store/errors.ts";

/**
 * How long a request past its share may be held, for a lease poll every
 * `pollMs`: until a silent server holding part of the share (frozen, or
 * killed) has lapsed and its share is taken back. Its last renewal came
 * before the request; a listing of the servers sees it within a poll of
 * theirs, one a lease and its margin later removes it, and the next poll
 * here takes the share (two polls, with 500 ms for the commits and a busy
 * machine). A server that answers ends the wait sooner, by lending or by
 * saying it has no room.
 */
export function shareWaitMs(pollMs: number): number {
  return LEASE_MS + LEASE_MARGIN_MS + 2 * PEERS_POLL_MS + 2 * pollMs + 500;
}

/**
 * What a server with `count` requests held wants, in whole even shares, so
 * that a want is rewritten (and every server told) only when it grows by
 * one, not at each request.
 */
export function wantOf(record: ShareRecord, count: number): number {
  const members = Math.max(1, Object.keys(record.shares).length);
  const chunk = Math.ceil(record.limit / members);
  return Math.min(record.limit, Math.ceil(count / chunk) * chunk);
}

/**
 * What a request held past its share meets when the wait ends with this
 * server out of its lease (the store unreachable or paused): the outage a
 * request within its share meets as well, never a 429.
 */
export function leaseLost(): StoreUnavailableError {
  return new StoreUnavailableError(
    "store_unavailable",
    "The lease ended while a request past this server's share was held: no other server could be asked for room",
  );
}

/**
 * The servers of `record` whose registrations are gone, so whose leases
 * have ended: not in a listing (`registered`) read after the record, which
 * they were in before they could commit a share (`live`, the peers'
 * listing, may be older).
 */
export async function goneFrom(
  record: ShareRecord,
  { self, live }: { self: string; live: readonly string[] },
  registered: () => Promise<string[]>,
): Promise<string[]> {
  const unknown = Object.keys({ ...record.shares, ...record.wants })
    .filter((id) => id !== self && !live.includes(id));
  if (unknown.length === 0) return [];
  const listed = new Set(await registered());
  return unknown.filter((id) => !listed.has(id));
}

/** Runs `run` after `ms` on the event loop's timers; returns the cancel. */
export function setTimer(run: () => void, ms: number): () => void {
  const timer = setTimeout(run, ms);
  return () => clearTimeout(timer);
}

/** The record every server holds without one: even shares of the live set. */
export function evenShares(
  counter: number,
  limit: RateLimit,
  { live, self }: { live: readonly string[]; self: string },
): ShareRecord {
  const ids = live.includes(self) ? [...live] : [...live, self].sort();
  const shares: Record<string, number> = {};
  ids.forEach((id, rank) => {
    shares[id] = shareOf(limit, { rank, count: ids.length, keyId: counter });
  });
  return {
    limit: limit.count,
    window: limit.windowSeconds,
    shares,
    wants: {},
    answers: {},
  };
}

/** The longest a record idles before its shares drift back to even. */
const IDLE_MAX_MS = 60_000;

/** Whether `record`, unchanged here `since` (monotonic ms), has idled its time by `now`. */
export function idle(
  record: ShareRecord | null,
  since: number | undefined,
  now: number,
): boolean {
  if (record === null || since === undefined) return false;
  return now - since >= Math.min(record.window * 1000, IDLE_MAX_MS);
}

/** What {@linkcode tidyShare} needs to know of this server. */
export interface TidyPlace {
  self: string;
  /** This server's share now (its cap applied). */
  mine: number;
  /** What no server holds. */
  free: number;
  live: readonly string[];
  /** The requests it counts in its window now. */
  used: number;
}

/**
 * Moves this server's own share of an idle record one step toward even
 * (or says to remove it once every live server is even); mutates `next`.
 */
export function tidyShare(
  counter: number,
  next: ShareRecord,
  { self, mine, free, live, used }: TidyPlace,
): "lowered" | "raised" | "remove" | null {
  const missing = live.filter((id) => next.shares[id] === undefined);
  if (missing.length > 0) {
    // A server started since counts from 0 here until it claims or the
    // others give back: the record stays whole.
    for (const id of missing) next.shares[id] = 0;
    return null;
  }
  const members = Object.keys(next.shares).sort();
  const evenOf = (id: string) =>
    shareOf({ count: next.limit }, {
      rank: members.indexOf(id),
      count: members.length,
      keyId: counter,
    });
  const target = evenOf(self);
  if (mine > target) {
    const lowest = Math.max(used, target);
    if (lowest >= mine) return null;
    next.shares[self] = lowest;
    return "lowered";
  }
  if (mine < target && free > 0) {
    next.shares[self] = Math.min(target, mine + free);
    return "raised";
  }
  const even = members.length === live.length &&
    members.every((id) => next.shares[id] === evenOf(id));
  return even ? "remove" : null;
}

/**
 * Writes a holder's answer to `others`' wants into `next` when it has a
 * share and no room: `frees()`, when its oldest counted request leaves.
 */
export function answer(
  next: ShareRecord,
  { self, mine, others }: { self: string; mine: number; others: number },
  frees: () => number,
): void {
  if (mine <= 0 || others <= 0 || next.answers[self] !== undefined) return;
  const ms = Math.min(next.window * 1000, frees());
  if (ms > 0) next.answers[self] = Math.ceil(ms);
}

/**
 * When another server could first have room, on this server's clock, by
 * `record`'s answers counted from `asked` (when this server's last write
 * that cleared them began, so before each was given: early,
 * never late). Infinity when no other holds any; undefined when one may
 * have room now: room unclaimed, a holder silent, or no want asked.
 */
export function answeredAt(
  record: ShareRecord,
  { self, asked }: { self: string; asked: number | undefined },
): number | undefined {
  if (sumOf(record.shares) < record.limit || asked === undefined) return;
  let at = Infinity;
  for (const [id, share] of Object.entries(record.shares)) {
    if (id === self || share === 0) continue;
    const given = record.answers[id];
    if (given === undefined) return;
    at = Math.min(at, asked + given);
  }
  return at;
}

/** This server's reckoning of answers: from its last clearing write, `asked`, to `now`. */
export type Reckoning = {
  self: string;
  asked: number | undefined;
  now: number;
};

/**
 * Whether an answer in `record` has run out by this server's reckoning
 * (counted from `asked`, as {@linkcode answeredAt} does): its server may
 * have room, and answers again only once the answers are cleared.
 */
export function expired(
  record: ShareRecord,
  { self, asked, now }: Reckoning,
): boolean {
  if (asked === undefined) return false;
  return Object.entries(record.answers).some(([id, given]) =>
    id !== self && asked + given <= now
  );
}

/**
 * Whether every other holder of `record` has answered it has no room, by
 * this server's reckoning ({@linkcode answeredAt}), until after `now`.
 */
export function heard(
  record: ShareRecord,
  { self, asked, now }: Reckoning,
): boolean {
  return (answeredAt(record, { self, asked }) ?? now) > now;
}

/**
 * Whether a waiting server's want in `record` (its step's next) must clear
 * every answer, so that each holder answers afresh after its commit. Not
 * for a want anew or grown: every answer in a record read after this
 * server's last clearing write (`asked`) was given after it, so counts
 * from it (early, never late). Only with no such write to count from, or
 * with an answer run out ({@linkcode expired}: its server may have room).
 * Clearing at every want anew made each server's request past the limit
 * wipe the answers the others relied on, and cost a round of polls.
 */
export function reasks(
  record: ShareRecord,
  { self, asked, now }: Reckoning,
): boolean {
  return (record.wants[self] !== undefined && asked === undefined) ||
    expired(record, { self, asked, now });
}

/**
 * A refusal as the client reads it: Retry-After and the RateLimit reset at
 * the earliest moment this server or another could have room
 * (`othersInMs`, {@linkcode ShareLedger.freesInMs}; null: none other holds
 * any), at least a second, never more than the window.
 */
export function refusal(
  decision: RateDecision,
  othersInMs: number | null,
): RateDecision {
  if (decision.ok) return decision;
  const others = othersInMs === null
    ? Infinity
    : Math.max(1, Math.ceil(othersInMs / 1000));
  const seconds = Math.max(1, Math.min(decision.retryAfterSeconds, others));
  return { ...decision, retryAfterSeconds: seconds, resetSeconds: seconds };
}

/** When each answer of a record was first seen here (monotonic ms), by server id. */
export type Arrivals = Map<string, { given: number; at: number }>;

/** A record as last seen, `since` when its version was first seen (monotonic). */
export type View = {
  record: ShareRecord;
  version: string;
  since: number;
  arrived: Arrivals;
};

/** `record`'s answers with when each was first seen: `before`'s time for one unchanged. */
export function arrivals(
  record: ShareRecord,
  before: Arrivals | undefined,
  now: number,
): Arrivals {
  const arrived: Arrivals = new Map();
  for (const [id, given] of Object.entries(record.answers)) {
    const seen = before?.get(id);
    arrived.set(id, seen?.given === given ? seen : { given, at: now });
  }
  return arrived;
}

/**
 * When to tell a refused client another server could first have room: the
 * refusal's own reckoning `at` errs early (so it asks again sooner), but a
 * client told that could be refused again. Counted instead from when each
 * answer arrived here, it errs late by its time in transit, never early.
 */
export function toldFreeAt(
  { record, arrived }: View,
  at: number,
  self: string,
): number {
  let late = Infinity;
  for (const [id, share] of Object.entries(record.shares)) {
    if (id === self || share === 0) continue;
    const answer = arrived.get(id);
    if (answer === undefined) return at;
    late = Math.min(late, answer.at + answer.given);
  }
  return Math.max(at, late);
}
