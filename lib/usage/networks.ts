/**
 * Where keys may be used from and where they are used from, on the request
 * path: the `allowFrom` check, and the notes of networks used and uses
 * refused, written off the request path in batches like lastUsedAt
 * (lib/usage/last_used.ts).
 *
 * A request costs a map lookup at most: a key with no `allowFrom` is not
 * checked at all, a restricted key's ranges are parsed once per cached
 * record, and a use is noted in memory and written by a timer. Each key and
 * network is written at most once a minute per process, each key's refused
 * uses at most once per flush, so a flood of refused uses from any number
 * of addresses costs one bounded write per key per flush.
 *
 * @module
 */

import { networkKey } from "../net/client_address.ts";
import { type Cidr, cidrContains, parseCidr, parseIp } from "../net/ip.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";
import { byKey, NETWORKS_KEPT, REFUSED_KEPT } from "../store/usage_lists.ts";
import { BackgroundRecorder, type RecorderOptions } from "../store/recorder.ts";

const MINUTE = 60_000;
/**
 * The most network notes one flush writes: a key used from that many new
 * networks within seconds is news already, and memory and the audit log stay
 * bounded. Notes past it are dropped and counted in one log line.
 */
export const NETWORK_NOTES_MAX = 10_000;
/**
 * The most networks one key is noted from per minute on one server. An
 * installation calls from one or two networks; a key used from more is
 * leaked, and 50 `key_new_network` lines a minute say so loudly enough,
 * while the audit log grows by at most that much per key whatever the
 * flood. Notes past it are dropped and counted like those past
 * {@linkcode NETWORK_NOTES_MAX}.
 */
export const NETWORK_NOTES_PER_KEY = 50;

/** Parsed ranges by the record's own array, so each cached record parses once. */
const parsedRanges = new WeakMap<readonly string[], Cidr[]>();

/**
 * True when `client` (an address as lib/net/client_address.ts gives it) may use
 * the key: always when the record has no `allowFrom`.
 */
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

/** Options of {@linkcode UsageRecorder}. */
export type UsageRecorderOptions = RecorderOptions;

/**
 * Notes networks used and uses refused, and writes them in the background;
 * each first use of a key from a network is logged.
 */
export class UsageRecorder extends BackgroundRecorder {
  #store: KeyStore;
  /** `id network` → when last noted, to note each at most once a minute. */
  #noted = new Map<string, number>();
  #networks: { id: number; network: string; at: Date }[] = [];
  /** The last client's network: most requests come from the client before them. */
  #lastClient = "";
  #lastNetwork = "";
  /** Network notes dropped since the last flush, past either bound. */
  #dropped = 0;
  /** Key id → the minute its network notes are counted in, and their count. */
  #perKey = new Map<number, { since: number; count: number }>();
  #refused = new Map<number, { address: string; at: Date }[]>();

  /** Writes pending notes every `flushMs`; a failed write is logged. */
  constructor(store: KeyStore, options: UsageRecorderOptions = {}) {
    super("usage", options);
    this.#store = store;
  }

  /**
   * Notes that key `id` authenticated a client counted under `lockoutKey`
   * (lib/net/client_address.ts), whose /24 or /48 is the network kept.
   */
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

  /** Notes a use of key `id` refused for coming from `client`. */
  refused(id: number, client: string, now: number): void {
    let pending = this.#refused.get(id);
    if (pending === undefined) this.#refused.set(id, pending = []);
    pending.push({ address: client, at: new Date(now) });
    // Only the latest are kept in the store, so only they need wait here.
    if (pending.length > REFUSED_KEPT) pending.shift();
  }

  protected take(): (() => Promise<void>) | null {
    if (this.#networks.length === 0 && this.#refused.size === 0) return null;
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
  }
}
