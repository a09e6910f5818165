/**
 * The API-key step of every authenticated route, in order: (1) the lookup
 * (lib/auth/key_lookup.ts); (2) a key used from outside its `allowFrom` fails
 * as an invalid one (same 401, counted), logged and noted; (3) a failure meets
 * the lock-out: 429 while locked, else counted and 401; (4) a rate-limited key
 * takes one request from this server's share of its limit, and a key of a
 * rotation line from its line's as well (2L); past either, it waits briefly
 * for another server to lend room, then 429 `rate_limited`, not counted;
 * (5) a success is noted and the record handed to the route, which
 * never sees a key that was not valid when checked. The lock-out comes after
 * the key, answering only requests that fail anyway: no lock (earned, shared
 * with a network, or false under a flood) ever refuses a valid key;
 * docs/design.md ("Lock-out levels") says what that costs.
 *
 * @module
 */

import { lockoutKey } from "../net/client_address.ts";
import {
  type AuthFailure,
  type AuthResult,
  KeyLookup,
} from "../auth/key_lookup.ts";
import type { LastUsedRecorder } from "../usage/last_used.ts";
import type { Lease } from "../auth/lease.ts";
import {
  DEFAULT_LOCKOUT,
  type LockEvent,
  LockoutTracker,
} from "../auth/lockout.ts";
import { Retirements } from "../auth/retirement.ts";
import { LineLimits } from "../auth/line_limits.ts";
import {
  lineCounter,
  lineLimit,
  type RateDecision,
  type RateLimit,
  RateLimiter,
} from "../auth/rate_limit.ts";
import type { Peers } from "../auth/peers.ts";
import { refusal, type ShareLedger } from "../auth/share_ledger.ts";
import { type LineState, rateLimitHeaders } from "./rate_limit_headers.ts";
import { StoreUnavailableError } from "../store/errors.ts";
import type { KeyRecord, KeyStore } from "../store/types.ts";
import { lineRoot } from "../store/records.ts";
import type { BackgroundWrites } from "../util/background.ts";
import {
  type AuthCounts,
  type AuthReason,
  countOutcome,
  OUTCOME_OF,
} from "./telemetry.ts";
import { allowedFrom, type UsageRecorder } from "../usage/networks.ts";
import {
  API_KEY_HEADER,
  keyInUrl,
  lockedOut,
  rateLimited,
  unauthorized,
} from "./responses.ts";

export type AuthDecision =
  | {
    ok: true;
    key: KeyRecord;
    /** The key's `RateLimit` fields, for the route's answer. */
    headers?: [string, string][];
  }
  | { ok: false; response: Response };

/** A request counted (or refused) by `take`, and its line's state for the headers. */
type Taken = {
  decision: RateDecision;
  /** The line's first key; null for a key never rotated. */
  root: number | null;
  /**
   * `limit` as the headers state it; `counted` as shares are placed by;
   * `share` this server's share of the line's count, what was spared included.
   */
  line: (LineState & { counted: RateLimit; share: number }) | null;
};

export interface AuthenticatorOptions {
  lockout?: LockoutTracker;
  lastUsed?: LastUsedRecorder;
  usage?: UsageRecorder;
  /** Hears each lock, key exposed in a URL and use refused by `allowFrom`. */
  log?: (fields: Record<string, unknown>) => void;
  lease?: Lease;
  background?: BackgroundWrites;
  now?: () => number;
  rateLimiter?: RateLimiter;
  /** Without it this server enforces each whole limit, as if alone. */
  peers?: Pick<Peers, "count" | "share">;
  /** Shares lent between servers; without it each server keeps its even share. */
  shares?:
    & Pick<ShareLedger, "place" | "wait">
    & Partial<Pick<ShareLedger, "freesInMs" | "refuses">>;
  /** The in-memory figures (lib/server/figures.ts). */
  counts?: AuthCounts;
}

export interface Authenticator {
  check(
    request: Request,
    context: { client: string; route: string },
  ): AuthDecision | Promise<AuthDecision>;
  /**
   * 429 when the client is locked out, else 400, counted toward the
   * lock-out. Valid `candidates` are marked exposed off the request path, so
   * the answer's timing tells nothing about which keys are valid.
   */
  refuseKeyInUrl(
    candidates: string[],
    context: { client: string; route: string },
  ): Response;
}

/**
 * What a route that takes no key but counts each request as a failing
 * client's needs of this step: the leaked key report (lib/routes/leaked.ts).
 */
export interface FailingGate {
  /**
   * 429 while the client is locked out; else `respond` (run only then), the
   * request counted toward the lock-out as a failure, and `outcome` counted.
   */
  refuseFailing(
    context: { client: string; route: string },
    outcome: AuthReason,
    respond: () => Response,
  ): Response;
  /** What a request with the key of this hash would meet (KeyLookup.byHash). */
  lookUpHash(hash: string): AuthResult | Promise<AuthResult>;
}

export function createAuthenticator(
  store: KeyStore,
  options: AuthenticatorOptions = {},
): Authenticator & FailingGate {
  const lockout = options.lockout ?? new LockoutTracker(DEFAULT_LOCKOUT);
  const now = options.now ?? Date.now;
  const lookup = new KeyLookup(store, { lease: options.lease, now });
  lookup.warm().catch(() => {});
  const { lastUsed, usage, log, background, peers, shares, counts } = options;
  const limiter = options.rateLimiter ?? new RateLimiter();
  const logError = (error: unknown) =>
    log?.({
      msg: "error",
      error: error instanceof Error ? error.name : typeof error,
    });
  const retirements = new Retirements(store, { background, onError: logError });
  // A line whose keys' limits differ (1.1, imported) spares what another
  // key accepted past the asking key's limit (lib/auth/line_limits.ts).
  const lineLimits = new LineLimits((id) => limiter.used(id));

  return {
    check(request, context) {
      const result = lookup.authenticate(request.headers.get(API_KEY_HEADER));
      // Without a promise in the steady state: see KeyLookup.authenticate.
      return result instanceof Promise
        ? result.then((found) => decide(found, context))
        : decide(result, context);
    },

    refuseKeyInUrl(candidates, context) {
      return refuseFailing(context, "url_exposed", () => {
        // Started even without `background`, which `?.` would skip.
        const write = noteExposure(candidates, context.client).catch(logError);
        background?.track(write);
        return keyInUrl();
      });
    },
    refuseFailing,
    lookUpHash: (hash) => lookup.byHash(hash),
  };

  function decide(
    result: AuthResult,
    { client, route }: { client: string; route: string },
  ): AuthDecision | Promise<AuthDecision> {
    if (!result.ok) {
      if (result.reason === "expired") retirements.lapsed(result.record);
      return refuseFailed(result.reason, { client, route });
    }
    const record = result.record;
    // Refused before a first use can retire anything: a key used from
    // outside its ranges has not been used.
    if (!allowedFrom(record, client)) {
      return refuseFailed("address", { client, route, keyId: record.id });
    }
    const limit = record.rateLimit;
    if (limit === null) return admit(record, { client, route });
    // After every check of the key: only a valid key's request counts.
    const taken = take(record, limit);
    if (taken.decision.ok || shares === undefined) {
      return rated(record, { client, route }, taken);
    }
    return held(record, { client, route }, taken);
  }

  /**
   * One request of `record` against its own count and, for a key of a
   * rotation line, its line's (first key `lineRoot`, 2L). A rotation's two
   * keys count apart, or whoever holds the old (often leaked) key could keep
   * the new one refused; the line count keeps the line within 2L.
   */
  function take(record: KeyRecord, limit: RateLimit): Taken {
    const id = record.id;
    const root = lineRoot(record);
    const own = place(limit, id);
    if (root === null) {
      return { decision: limiter.take(id, limit, own), root, line: null };
    }
    const counted = lineLimit(limit);
    const shared = place(counted, lineCounter(root));
    // What the line's share here leaves beside the key's own (L of 2L on
    // one server): another key's requests past it are spared.
    const beside = { share: shared.share - own.share };
    const spared = lineLimits.spared(record, limit, beside);
    const line = spared === 0 ? counted : {
      count: counted.count + spared,
      windowSeconds: limit.windowSeconds,
    };
    const share = shared.share + spared;
    const decision = limiter.take(id, limit, {
      ...own,
      line: { root, share, scale: shared.scale },
    });
    // The line binds when it refused the request, or has less left.
    const keyLeft = Math.max(0, Math.floor(own.share) - limiter.used(id)) *
      own.scale;
    const binds = decision.lineFull === true ||
      (decision.ok && decision.remaining < keyLeft);
    return { decision, root, line: { limit: line, counted, binds, share } };
  }

  /**
   * A request past this server's share of its key's count or its line's:
   * held while another server may lend that counter room
   * (lib/auth/share_ledger.ts), each counter once, refused only once none did.
   */
  async function held(
    record: KeyRecord,
    { client, route }: { client: string; route: string },
    first: Taken,
  ): Promise<AuthDecision> {
    const limit = record.rateLimit!;
    const { root } = first;
    const lineId = root === null ? null : lineCounter(root);
    let last = first;
    const retry = () => (last = take(record, limit)).decision.ok;
    // Past both counts, the line first when it refuses whatever the key's
    // own could borrow: past its share here, and every other server holding
    // part of it has answered it has no room (the ledger's view, or one read
    // of the record; no write). Its own first cost a round of polls on three
    // servers at each such request (a final review: 280-454 ms on KV), to
    // borrow a share the line then refused, and moved that share, so the
    // next server had to borrow it back.
    const lineRefuses = async ({ decision, line }: Taken) =>
      lineId !== null && line !== null && (decision.lineFull === true || (
        limiter.used(lineId) >= Math.floor(line.share) &&
        await shares!.refuses?.(lineId, line.counted) === true
      ));
    const waited = new Set<number>();
    let byLine = false;
    while (!last.decision.ok) {
      byLine = await lineRefuses(last);
      const counter = byLine ? lineId! : record.id;
      if (waited.has(counter)) break;
      waited.add(counter);
      const counted = byLine ? last.line!.counted : limit;
      // Tried once more at the end: the window may have let one go since
      // the last poll, and the refusal's Retry-After is counted from now.
      const accepted: boolean = await shares!.wait(counter, counted, retry);
      if (!accepted) retry();
    }
    if (last.decision.ok) return rated(record, { client, route }, last);
    // Retry-After: when the first server could have room, not this one
    // alone; and the line named as what binds when it refused.
    const full = byLine ? lineId! : record.id;
    const told = refusal(last.decision, shares!.freesInMs?.(full) ?? null);
    const line = byLine ? { ...last.line!, binds: true } : last.line;
    return rated(record, { client, route }, { decision: told, root, line });
  }

  /** This server's share of a limit, and the servers it is one of. */
  function place(
    limit: RateLimit,
    counter: number,
  ): { share: number; scale: number } {
    if (shares !== undefined) return shares.place(limit, counter);
    return {
      share: peers === undefined ? limit.count : peers.share(limit, counter),
      scale: peers?.count ?? 1,
    };
  }

  /** The answer to a rate-limited key's request, as `taken` says. */
  function rated(
    record: KeyRecord,
    { client, route }: { client: string; route: string },
    { decision, line }: Taken,
  ): AuthDecision | Promise<AuthDecision> {
    const limit = record.rateLimit!;
    const headers = rateLimitHeaders(
      limit,
      decision,
      line === null ? {} : { line },
    );
    if (decision.ok) return admit(record, { client, route }, headers);
    count("rate_limited", route, record.id);
    usage?.rateLimited(record.id, limit.windowSeconds, now());
    return {
      ok: false,
      response: rateLimited(decision.retryAfterSeconds, headers),
    };
  }

  /** A valid key's request, within its limit: retires a predecessor, then succeeds. */
  function admit(
    record: KeyRecord,
    { client, route }: { client: string; route: string },
    headers?: [string, string][],
  ): AuthDecision | Promise<AuthDecision> {
    // Before the success is answered, so that the old key is refused on
    // every instance from the next request on.
    if (record.retires !== null) {
      return retirements.firstUse(record).then(() => {
        // The cached record still holds the spent link; kept, it would
        // make every later request of the key try the retirement again.
        lookup.forget(record.id);
        return succeed(record, { client, route }, headers);
      });
    }
    return succeed(record, { client, route }, headers);
  }

  function succeed(
    record: KeyRecord,
    { client, route }: { client: string; route: string },
    headers: [string, string][] | undefined,
  ): AuthDecision {
    count("valid", route, record.id);
    const at = now();
    lastUsed?.used(record.id, at);
    usage?.used(record.id, lockoutKey(client), at);
    return { ok: true, key: record, headers };
  }

  /** 429 while the client is locked, else counted and 401, the same for every reason. */
  function refuseFailed(
    reason: AuthFailure | "address",
    { client, route, keyId }: { client: string; route: string; keyId?: number },
  ): { ok: false; response: Response } {
    const outcome = reason === "address" ? "refused_network" : reason;
    const response = refuseFailing({ client, route }, outcome, () => {
      if (keyId !== undefined) {
        usage?.refused(keyId, client, now());
        log?.({ msg: "key_refused_from_address", apiKeyId: keyId, client });
      }
      return unauthorized();
    });
    return { ok: false, response };
  }

  /**
   * The one gate of a request that fails anyway: 429 while its client is
   * locked; else `respond` (which runs only then), the failure counted
   * toward the lock-out, and `outcome` counted.
   */
  function refuseFailing(
    { client, route }: { client: string; route: string },
    outcome: AuthReason,
    respond: () => Response,
  ): Response {
    const counted = lockoutKey(client);
    const wait = lockout.retryAfter(counted);
    if (wait > 0) {
      count("locked_out", route);
      return lockedOut(wait);
    }
    const response = respond();
    noteLock(lockout.fail(counted), client);
    count(outcome, route);
    return response;
  }

  function count(reason: AuthReason, route: string, keyId?: number): void {
    countOutcome(OUTCOME_OF[reason], route);
    counts?.outcome(reason, keyId);
  }

  async function noteExposure(
    candidates: string[],
    client: string,
  ): Promise<void> {
    for (const candidate of candidates) {
      try {
        const result = await lookup.authenticate(candidate);
        if (!result.ok) continue;
        const marked = await store.markExposed(result.record.id, {
          actor: "server",
          from: client,
        });
        if (marked) {
          log?.({
            msg: "key_exposed_in_url",
            apiKeyId: result.record.id,
            client,
          });
        }
      } catch (error) {
        // The request was refused either way; a store hiccup is not news.
        if (!(error instanceof StoreUnavailableError)) throw error;
      }
    }
  }

  function noteLock(lock: LockEvent | null, client: string): void {
    if (!lock) return;
    counts?.lockout(lock.scope);
    log?.({
      msg: "lockout",
      scope: lock.scope,
      client: lock.scope === "address" ? client : lock.client,
      failures: lock.failures,
      lockedUntil: lock.lockedUntil.toISOString(),
    });
  }
}
