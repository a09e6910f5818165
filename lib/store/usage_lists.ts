/**
 * Where a key may be used from and was used from, alike in every store: the
 * canonical `allowFrom`, and the bounded lists of networks seen and uses
 * refused, merged here so both stores keep the same bounds and order.
 * @module
 */

import { formatCidr, parseCidr } from "../net/ip.ts";
import { InvalidFieldError } from "./errors.ts";
import type { NetworkUse, RefusedUse } from "./types.ts";

/** The most ranges one key's `allowFrom` may hold. */
export const ALLOW_FROM_MAX = 32;
/** The networks kept per key: the ones most recently seen. */
export const NETWORKS_KEPT = 5;
/** The refused uses kept per key: the latest. */
export const REFUSED_KEPT = 10;

/**
 * Checks and canonicalises ranges (`10.0.0.0/8`, `2001:db8::/32`, or a bare
 * address for a range of one): duplicates dropped, order kept. Throws
 * {@linkcode InvalidFieldError} (field `allowFrom`) for text that is not a
 * range, a range with host bits set, or more than {@linkcode ALLOW_FROM_MAX}.
 */
export function normalizeAllowFrom(ranges: readonly string[]): string[] {
  const out: string[] = [];
  for (const text of ranges) {
    const cidr = parseCidr(text.trim());
    if (cidr === null) {
      throw new InvalidFieldError("allowFrom", "not_a_range", {
        value: text.slice(0, 80),
      });
    }
    const canonical = formatCidr(cidr);
    if (!out.includes(canonical)) out.push(canonical);
  }
  if (out.length === 0) throw new InvalidFieldError("allowFrom", "empty");
  if (out.length > ALLOW_FROM_MAX) {
    throw new InvalidFieldError("allowFrom", "too_long", {
      limit: ALLOW_FROM_MAX,
    });
  }
  return out;
}

/** The audit detail of a change of `allowFrom`, and of a key created with one. */
export function allowFromDetail(allowFrom: string[] | null): string {
  return allowFrom === null
    ? "usable from anywhere"
    : `usable only from ${allowFrom.join(", ")}`;
}

/**
 * `current` with `uses` merged: a listed network's last seen time moves on
 * (never back), a new one is appended, and only the {@linkcode NETWORKS_KEPT}
 * most recently seen stay, in first-seen order. `added` lists every network
 * not held before, even those more recent ones pushed out in this merge.
 */
export function mergeNetworks(
  current: readonly NetworkUse[],
  uses: Iterable<{ network: string; at: Date }>,
): { networks: NetworkUse[]; added: string[] } {
  const byNetwork = new Map(current.map((n) => [n.network, { ...n }]));
  const added: string[] = [];
  for (const { network, at } of uses) {
    const iso = at.toISOString();
    const seen = byNetwork.get(network);
    if (seen === undefined) {
      byNetwork.set(network, {
        network,
        firstSeenAt: iso,
        lastSeenAt: iso,
      });
      added.push(network);
    } else {
      if (iso > seen.lastSeenAt) seen.lastSeenAt = iso;
      if (iso < seen.firstSeenAt) seen.firstSeenAt = iso;
    }
  }
  const kept = [...byNetwork.values()]
    .sort((a, b) => cmp(b.lastSeenAt, a.lastSeenAt))
    .slice(0, NETWORKS_KEPT)
    .sort((a, b) => cmp(a.firstSeenAt, b.firstSeenAt));
  // Every network new to the list is reported, kept or not: each first use
  // from a network is audited, however many one flush brings.
  return { networks: kept, added };
}

/** `current` with `uses` appended, oldest first, only the latest {@linkcode REFUSED_KEPT} kept. */
export function appendRefused(
  current: readonly RefusedUse[],
  uses: Iterable<{ address: string; at: Date }>,
): RefusedUse[] {
  const all = [
    ...current,
    ...[...uses].map((u) => ({ address: u.address, at: u.at.toISOString() })),
  ].sort((a, b) => cmp(a.at, b.at));
  return all.slice(-REFUSED_KEPT);
}

/** Groups uses by key id, keeping their order. */
export function byKey<T extends { id: number }>(
  uses: Iterable<T>,
): Map<number, T[]> {
  const groups = new Map<number, T[]>();
  for (const use of uses) {
    if (!Number.isSafeInteger(use.id)) continue;
    const group = groups.get(use.id);
    if (group) group.push(use);
    else groups.set(use.id, [use]);
  }
  return groups;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Each key's latest use, in id order (so writers lock in one order), impossible ids dropped. */
export function latestUses(
  uses: Iterable<{ id: number; at: Date }>,
): { id: number; at: Date }[] {
  const latest = new Map<number, Date>();
  for (const { id, at } of uses) {
    if (!Number.isSafeInteger(id)) continue;
    const seen = latest.get(id);
    if (seen === undefined || at.getTime() > seen.getTime()) latest.set(id, at);
  }
  return [...latest].sort(([a], [b]) => a - b).map(([id, at]) => ({ id, at }));
}
