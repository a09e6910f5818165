/**
 * The `allowFrom` check, and the notes of networks used and uses refused,
 * written in batches. A request costs a map lookup at most; each key and
 * network is written at most once a minute per process and each key's
 * refused uses once per flush, so a flood from any number of addresses
 * costs one bounded write per key per flush.
 *
 * @module
 */

import { networkKey } from "../net/client_address.ts";
import { type Cidr, cidrContains, parseCidr, parseIp } from "../net/ip.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";
import { byKey, NETWORKS_KEPT, REFUSED_KEPT } from "../store/usage_lists.ts";
import { BackgroundRecorder, type RecorderOptions } from "../store/recorder.ts";

const MINUTE = 60_000;
/** Per flush; past it notes are dropped and counted in one log line. */
export const NETWORK_NOTES_MAX = 10_000;
/** Per key per minute: an installation calls from one or two networks, and 50 lines a minute say "leaked" loudly enough. */
const NETWORK_NOTES_PER_KEY = 50;

/** By the record's own array, so each cached record parses once. */
const parsedRanges = new WeakMap<readonly string[], Cidr[]>();

export function allowedFrom(record: KeyRecord, client: string): boolean {
  const ranges = record.allowFrom;
  if (ranges == null) return true;
  let cidrs = parsedRanges.get(ranges);
  if (cidrs === undefined) {
    cidrs = ranges.map(parseCidr).filter((c): c is Cidr => c !== null);
    parsedRanges.set(ranges, cidrs);
  }
  const address = parseIp(client);
  return address !== null && cidrs.some((c) => cidrContains(c, address));
}

/** Each first use of a key from a network is logged. */
export class UsageRecorder extends BackgroundRecorder {
  #store: KeyStore;
  /** `id network` → when last noted, to note each at most once a minute. */
  #noted = new Map<string, number>();
  #networks: { id: number; network: string; at: Date }[] = [];
  /** Most requests come from the client before them. */
  #lastClient = "";
  #lastNetwork = "";
  #dropped = 0;
  /** Key id → the minute its network notes are counted in, and their count. */
  #perKey = new Map<number, { since: number; count: number }>();
  #refused = new Map<number, { address: string; at: Date }[]>();
  /** Key id → the rate-limit window it was noted in, and when that ends. */
  #limited = new Map<number, { window: number; until: number }>();
  #limitedPending: { id: number; at: Date }[] = [];

  constructor(store: KeyStore, options: RecorderOptions = {}) {
    super("usage", options);
    this.#store = store;
  }

  /** The network kept is the /24 or /48 of `lockoutKey`. */
  used(id: number, lockoutKey: string, now: number): void {
    if (lockoutKey !== this.#lastClient) {
      this.#lastNetwork = networkKey(lockoutKey);
      this.#lastClient = lockoutKey;
    }
    const network = this.#lastNetwork;
    const noted = `${id} ${network}`;
    if (now - (this.#noted.get(noted) ?? -Infinity) < MINUTE) return;
    let budget = this.#perKey.get(id);
    if (budget === undefined || now - budget.since >= MINUTE) {
      this.#perKey.set(id, budget = { since: now, count: 0 });
    }
    // A key's first few notes of the minute pass the flush's cap: otherwise
    // a flood on other keys could hide a stolen key's first use elsewhere.
    // There are no more such notes than a few per key in use.
    if (
      (budget.count >= NETWORKS_KEPT &&
        this.#networks.length >= NETWORK_NOTES_MAX) ||
      budget.count >= NETWORK_NOTES_PER_KEY
    ) {
      this.#dropped++;
      return;
    }
    budget.count++;
    this.#noted.set(noted, now);
    this.#networks.push({ id, network, at: new Date(now) });
  }

  refused(id: number, client: string, now: number): void {
    let pending = this.#refused.get(id);
    if (pending === undefined) this.#refused.set(id, pending = []);
    pending.push({ address: client, at: new Date(now) });
    // Only the latest are kept in the store, so only they need wait here.
    if (pending.length > REFUSED_KEPT) pending.shift();
  }

  /**
   * A key refused by its rate limit: noted once per window of the limit per
   * process, for `key.rate_limited`, which the store raises once per window
   * whichever server notes it.
   */
  rateLimited(id: number, windowSeconds: number, now: number): void {
    const windowMs = windowSeconds * 1000;
    const window = Math.floor(now / windowMs);
    if (this.#limited.get(id)?.window === window) return;
    this.#limited.set(id, { window, until: (window + 1) * windowMs });
    this.#limitedPending.push({ id, at: new Date(now) });
  }

  protected take(): (() => Promise<void>) | null {
    if (
      this.#networks.length === 0 && this.#refused.size === 0 &&
      this.#limitedPending.length === 0
    ) return null;
    const limited = this.#limitedPending;
    this.#limitedPending = [];
    const networks = this.#networks;
    // Already one list per key, as each key's notes are written apart.
    const refused = [...this.#refused].map(([id, uses]) =>
      uses.map((use) => ({ id, ...use }))
    );
    this.#networks = [];
    this.#refused.clear();
    if (this.#dropped > 0) {
      this.log({ msg: "network_notes_dropped", count: this.#dropped });
      this.#dropped = 0;
    }
    this.#forgetOld(Date.now());
    return async () => {
      // Each key's notes are written apart, so that a write that fails for
      // one key costs no other key its notes; the first failure is then
      // logged by the recorder.
      const failures: unknown[] = [];
      for (const { id, at } of limited) {
        await this.#store.noteRateLimited(id, at).catch((error) =>
          failures.push(error)
        );
      }
      for (const uses of refused) {
        await this.#store.recordRefusedUses(uses).catch((error) =>
          failures.push(error)
        );
      }
      for (const [, uses] of byKey(networks)) {
        try {
          for (
            const { id, network } of await this.#store.recordNetworkUses(uses)
          ) {
            this.log({ msg: "key_new_network", apiKeyId: id, network });
          }
        } catch (error) {
          failures.push(error);
        }
      }
      if (failures.length > 0) throw failures[0];
    };
  }

  #forgetOld(now: number): void {
    for (const [noted, at] of this.#noted) {
      if (now - at >= MINUTE) this.#noted.delete(noted);
    }
    for (const [id, { since }] of this.#perKey) {
      if (now - since >= MINUTE) this.#perKey.delete(id);
    }
    for (const [id, { until }] of this.#limited) {
      if (now >= until) this.#limited.delete(id);
    }
  }
}
