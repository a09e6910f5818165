/**
 * What a rotation line's other keys have accepted past the asking key's own
 * limit, for a line whose keys' limits differ (written by 1.1, whose `keys
 * update --rate` changed one key, or imported): docs/design.md, "A line has
 * one limit". A key's line is 2L of its own limit L, so a key of a larger
 * limit could fill the line of a smaller one and have a key refused that has
 * used none of its own. Another key's requests therefore count on the asking
 * key's line up to L each: one key's traffic never spends the other's own
 * budget, and the line still accepts at most twice its largest limit in any
 * window. A line of one limit spares nothing.
 *
 * @module
 */

import type { KeyRecord, RateLimit } from "../store/types.ts";
import { lineRoot } from "../store/records.ts";

/** Line keys whose limit is kept: a forgotten one is spared nothing. */
const MAX_KEPT = 10_000;

/** The limits line keys took with on this server, and what they spare. */
export class LineLimits {
  #used: (id: number) => number;
  /** Each line key's count as it last took here. */
  #counts = new Map<number, number>();

  /** `used`: the requests of a key this server counts in its window now. */
  constructor(used: (id: number) => number) {
    this.#used = used;
  }

  /**
   * Notes `record`'s limit, and returns what the other keys it links to
   * (its line's first key, its predecessor, its replacement) accepted here
   * past `share`, what this server's share of the line leaves beside its
   * share of the asking key's own (L of 2L on one server), counting only
   * those last seen here at a larger limit. So the line refuses here no
   * sooner than the key's own share, and across the servers it takes at
   * most the other keys' requests and this key's L. By the shares, not the
   * limit: with n servers each counts about 1/n of the other key's
   * requests, and measured against the whole limit none would be spared.
   */
  spared(
    record: KeyRecord,
    limit: RateLimit,
    { share }: { share: number },
  ): number {
    this.#note(record.id, limit.count);
    let spared = 0;
    const ids = [lineRoot(record), record.rotatedFrom, record.replacedBy];
    for (let i = 0; i < ids.length; i++) {
      const other = ids[i];
      if (other === null || other === record.id || ids.indexOf(other) < i) {
        continue;
      }
      if ((this.#counts.get(other) ?? 0) <= limit.count) continue;
      spared += Math.max(0, this.#used(other) - Math.floor(share));
    }
    return spared;
  }

  /** The oldest note goes past the bound. */
  #note(id: number, count: number): void {
    if (this.#counts.get(id) === count) return;
    this.#counts.delete(id);
    if (this.#counts.size >= MAX_KEPT) {
      this.#counts.delete(this.#counts.keys().next().value!);
    }
    this.#counts.set(id, count);
  }
}
