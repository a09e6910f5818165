/**
 * What a leak report (POST /api/v1/keys/leaked) does, all of it after the
 * answer has gone: every found value is hashed alike, whatever its shape,
 * and looked up as a request's key would be; each valid key is marked
 * exposed (source `report`) and, unless the operator chose `notify`, revoked
 * by the store's own revocation, which returns once every server has
 * acknowledged it, as a console revocation does. One log line per report:
 * the reporter's address and counts, never a value or a hash.
 *
 * @module
 */

import { hashApiKey } from "./api_key.ts";
import type { AuthResult } from "./key_lookup.ts";
import { AUDIT_DETAIL } from "../store/records.ts";
import type { KeyStore } from "../store/types.ts";
import type { BackgroundWrites } from "../util/background.ts";

/** LEAKED_KEY_ACTION: what a valid key that was reported gets. */
export type LeakedKeyAction = "revoke" | "notify";

/** Options of {@linkcode LeakReports}. */
export interface LeakReportsOptions {
  /** What a request with the key of this hash would meet (KeyLookup.byHash). */
  lookUp: (hash: string) => AuthResult | Promise<AuthResult>;
  /** Default `revoke`. */
  action?: LeakedKeyAction;
  /** Counts each report's work, so that a stop waits for it. */
  background?: BackgroundWrites;
  log?: (fields: Record<string, unknown>) => void;
  now?: () => number;
}

/**
 * A key reported again within this time is not marked again by the same
 * server: under `notify` it stays valid, and whoever holds it could otherwise
 * write an audit line per report, as fast as the lock-out lets one address.
 */
const REMARK_AFTER_MS = 60 * 60 * 1000;
/** Keys remembered as marked; past it the oldest is forgotten (marked again at worst). */
const REMEMBERED = 10_000;

/** Takes reports and does their work off the request path. */
export class LeakReports {
  readonly #store: Pick<KeyStore, "markExposed" | "revoke">;
  readonly #lookUp: LeakReportsOptions["lookUp"];
  readonly #action: LeakedKeyAction;
  readonly #background?: BackgroundWrites;
  readonly #log?: LeakReportsOptions["log"];
  readonly #now: () => number;
  /** Key id → when this server last marked it reported. */
  readonly #marked = new Map<number, number>();

  constructor(
    store: Pick<KeyStore, "markExposed" | "revoke">,
    options: LeakReportsOptions,
  ) {
    this.#store = store;
    this.#lookUp = options.lookUp;
    this.#action = options.action ?? "revoke";
    this.#background = options.background;
    this.#log = options.log;
    this.#now = options.now ?? Date.now;
  }

  /**
   * Returns at once, having done nothing with the values: their work starts
   * on a later turn of the event loop, once the answer is on its way, so
   * that no answer waits on a lookup that a valid key would make slower.
   */
  report(values: readonly string[], client: string): void {
    const work = new Promise((resolve) => setTimeout(resolve, 0))
      .then(() => this.#process(values, client));
    this.#background?.track(work);
  }

  async #process(values: readonly string[], client: string): Promise<void> {
    const found = new Set<number>();
    const exposed: number[] = [];
    const revoked: number[] = [];
    let failed: string | undefined;
    try {
      // Every value the same way: a hash, then the index and the cache.
      const hashes = new Set(values.map(hashApiKey));
      for (const hash of hashes) {
        const result = await this.#lookUp(hash);
        if (result.ok) found.add(result.record.id);
      }
      const actor = AUDIT_DETAIL.reporter(client);
      for (const id of found) {
        if (this.#recentlyMarked(id)) {
          // Marked already; revoked too unless the operator chose notify.
        } else if (
          await this.#store.markExposed(id, {
            actor,
            from: client,
            source: "report",
          })
        ) {
          this.#remember(id);
          exposed.push(id);
        }
        if (this.#action !== "revoke") continue;
        const { changed } = await this.#store.revoke(id, {
          actor,
          reason: AUDIT_DETAIL.reportedReason(client),
        });
        if (changed) revoked.push(id);
      }
    } catch (error) {
      // The reporter had its 202; the operator reads what failed here.
      failed = error instanceof Error ? error.name : typeof error;
    }
    this.#log?.({
      msg: "leak_report",
      client,
      values: values.length,
      validKeys: found.size,
      exposed,
      revoked,
      ...(failed === undefined ? {} : { error: failed }),
    });
  }

  #recentlyMarked(id: number): boolean {
    const at = this.#marked.get(id);
    return at !== undefined && this.#now() - at < REMARK_AFTER_MS;
  }

  #remember(id: number): void {
    this.#marked.delete(id);
    if (this.#marked.size >= REMEMBERED) {
      this.#marked.delete(this.#marked.keys().next().value!);
    }
    this.#marked.set(id, this.#now());
  }
}
