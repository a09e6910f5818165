/**
 * What a leak report (POST /api/v1/keys/leaked) does, all of it after the
 * answer has gone: every found value is hashed alike, whatever its shape,
 * and looked up as a request's key would be; each valid key is marked
 * exposed (source `report`) and, unless the operator chose `notify`, revoked
 * by the store's own revocation, which returns once every server has
 * acknowledged it, as a console revocation does. One log line per attempt:
 * the reporter's address and counts, never a value or a hash. A report the
 * store could not take is tried again until it answers: the reporter had
 * its 202 and the line names no key, so nobody else could finish it.
 *
 * @module
 */

import { hashApiKey } from "./api_key.ts";
import type { AuthResult } from "./key_lookup.ts";
import { StoreUnavailableError } from "../store/errors.ts";
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
  /** The first wait before a report the store failed is tried again, doubled each time up to 10 s, so that a key is revoked within seconds of the store coming back; default 1 s. */
  retryMs?: number;
  /** Hashes of failed reports kept for a retry; past it a failed report is dropped. Default 10 000. */
  maxWaitingHashes?: number;
}

/** A report's work: its values' hashes (the values are not kept). */
interface Job {
  client: string;
  values: number;
  hashes: Set<string>;
  /** Attempts made so far. */
  tries: number;
}

/**
 * A key reported again within this time is not marked again by the same
 * server: under `notify` it stays valid, and whoever holds it could otherwise
 * write an audit line per report, as fast as the lock-out lets one address.
 */
const REMARK_AFTER_MS = 60 * 60 * 1000;
/** Keys remembered as marked; past it the oldest is forgotten (marked again at worst). */
const REMEMBERED = 10_000;
const MAX_RETRY_MS = 10_000;

/** Takes reports and does their work off the request path. */
export class LeakReports {
  readonly #store: Pick<KeyStore, "markExposed" | "revoke">;
  readonly #lookUp: LeakReportsOptions["lookUp"];
  readonly #action: LeakedKeyAction;
  readonly #background?: BackgroundWrites;
  readonly #log?: LeakReportsOptions["log"];
  readonly #now: () => number;
  readonly #retryMs: number;
  readonly #maxWaiting: number;
  /** Hashes held by reports waiting for a retry. */
  #waiting = 0;
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
    this.#retryMs = options.retryMs ?? 1000;
    this.#maxWaiting = options.maxWaitingHashes ?? 10_000;
  }

  /**
   * Returns at once, having done nothing with the values: their work starts
   * on a later turn of the event loop, once the answer is on its way, so
   * that no answer waits on a lookup that a valid key would make slower.
   */
  report(values: readonly string[], client: string): void {
    const work = new Promise((resolve) => setTimeout(resolve, 0))
      .then(() =>
        this.#process({
          client,
          values: values.length,
          // Every value the same way: a hash, then the index and the cache.
          // Trimmed, as HTTP trims a header's value: a key found with the
          // space or line end around it authenticates, so it is reported.
          hashes: new Set(values.map((value) => hashApiKey(value.trim()))),
          tries: 0,
        })
      );
    this.#background?.track(work);
  }

  /**
   * Once more after a wait that a stop does not wait for (the store may be
   * down for longer than a stop may take): only the attempt is tracked.
   */
  #retry(job: Job, waitMs: number): void {
    this.#waiting += job.hashes.size;
    const timer = setTimeout(() => {
      this.#background?.track(this.#process({ ...job, tries: job.tries + 1 }));
    }, waitMs);
    Deno.unrefTimer(timer);
  }

  async #process(job: Job): Promise<void> {
    const { client, hashes } = job;
    const found = new Set<number>();
    const exposed: number[] = [];
    const revoked: number[] = [];
    let failed: unknown;
    try {
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
      failed = error;
    }
    const line: Record<string, unknown> = {
      msg: "leak_report",
      client,
      values: job.values,
      validKeys: found.size,
      exposed,
      revoked,
    };
    // A retried report holds its place from its first failure to its last
    // attempt's end, so that the bound is never passed between two tries.
    if (job.tries > 0) this.#waiting -= hashes.size;
    if (failed !== undefined) {
      line.error = failed instanceof Error ? failed.name : typeof failed;
      // Another kind of failure would fail alike the next time. A retry
      // starts over: keys marked or revoked already are skipped, as on a
      // second report of them.
      if (!(failed instanceof StoreUnavailableError)) line.dropped = true;
      else if (this.#waiting + hashes.size <= this.#maxWaiting) {
        const waitMs = Math.min(this.#retryMs * 2 ** job.tries, MAX_RETRY_MS);
        line.retryInMs = waitMs;
        this.#retry(job, waitMs);
      } else line.dropped = true;
    }
    this.#log?.(line);
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
