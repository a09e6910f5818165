/**
 * {@linkcode KeyStore} over any backend (lib/store/backend.ts): the one
 * implementation of the store contract. Reads and the instance registry pass
 * through to the backend; every change runs a rule of `changes.ts` in the
 * backend's atomic change, declared with what it alters. One that alters
 * authentication returns only once the store's {@linkcode Acknowledge} settled
 * it (lib/store/acknowledged.ts waits for every server); a usage note at once.
 * @module
 */

import type { ChangeDraft, StoreBackend } from "./backend.ts";
import {
  type Acknowledge,
  type AuthenticationChange,
  type Committed,
  NO_WAIT,
} from "./change.ts";
import {
  createKey,
  exposeKey,
  limitKey,
  noteNetworks,
  noteRefused,
  restrictKey,
  retireKey,
  revokeKey,
  rotateKey,
} from "./changes.ts";
import { ImportStateError } from "./errors.ts";
import { noteExpiring, noteRateLimited } from "./webhook_notes.ts";
import type { WebhookStore } from "./webhook_types.ts";
import type { ShareStore } from "./rate_shares.ts";
import { exportItems } from "./records.ts";
import { readRegistration, storedInstance } from "./registrations.ts";
import { byKey, latestUses } from "./usage_lists.ts";
import type {
  AuditEntry,
  ChangeOptions,
  ExportItem,
  ExposeOptions,
  InstanceInfo,
  InstanceRecord,
  KeyChanges,
  KeyRecord,
  KeyStore,
  NewKeyInput,
  RateLimit,
  RetireOptions,
  RevokeOptions,
  RevokeResult,
  RotateOptions,
  RotateResult,
} from "./types.ts";

export interface KeyServiceOptions {
  /** Settles every authentication change before it returns; without it, none waits. */
  acknowledge?: Acknowledge;
  /** Hears of every call, by method: what the traffic costs the store. */
  onCall?: (method: keyof KeyStore) => void;
}

/**
 * Network notes (audit lines) per change: with a webhook delivery per line
 * for each of at most 10 endpoints, 550 writes, under Deno KV's 1,000.
 */
const NOTES_PER_CHANGE = 50;

/** The key store: the rules once, over one backend's primitives. */
export class KeyService implements KeyStore {
  #backend: StoreBackend;
  #options: KeyServiceOptions;
  #acknowledge: Acknowledge;
  #call: (method: keyof KeyStore) => void;
  /** Set when the backend can push a notice at every change. */
  onChange?: (listener: () => void) => Promise<() => Promise<void>>;
  /** A property, not a getter: a proxy of the store (tests) reads it as is. */
  readonly webhooks: WebhookStore;
  /** Rate-limit shares lent between servers (lib/auth/share_ledger.ts). */
  readonly shares: ShareStore;

  constructor(backend: StoreBackend, options: KeyServiceOptions = {}) {
    this.#backend = backend;
    this.webhooks = backend.webhooks;
    this.shares = backend.shares;
    this.#options = options;
    this.#acknowledge = options.acknowledge ?? NO_WAIT;
    this.#call = options.onCall ?? (() => {});
    if (backend.onChange !== undefined) {
      this.onChange = (listener) => {
        this.#call("onChange");
        return backend.onChange!(listener);
      };
    }
  }

  /** This store with `options` changed, on the same backend (closing one closes both). */
  with(options: KeyServiceOptions): KeyService {
    return new KeyService(this.#backend, { ...this.#options, ...options });
  }

  /** The backend, once a call of `method` is counted. */
  #to(method: keyof KeyStore): StoreBackend {
    this.#call(method);
    return this.#backend;
  }

  async #settle<T>(change: Promise<Committed<T, "authentication">>) {
    return await (await change).settle(this.#acknowledge);
  }

  /** A change that alters authentication, made and settled. */
  #authenticating<T>(
    name: AuthenticationChange,
    work: (draft: ChangeDraft<"authentication">) => Promise<T>,
  ): Promise<T> {
    this.#call(name);
    return this.#settle(
      this.#backend.change({ name, alters: "authentication" }, work),
    );
  }

  async findByHash(hash: string): Promise<KeyRecord | null> {
    return (await this.#to("findByHash").findByHashAt(hash)).record;
  }

  findByHashAt(
    hash: string,
  ): Promise<
    { record: KeyRecord | null; revision: bigint; authRevision: bigint }
  > {
    return this.#to("findByHashAt").findByHashAt(hash);
  }

  get(id: number): Promise<KeyRecord | null> {
    return this.#to("get").get(id);
  }

  getByName(name: string): Promise<KeyRecord | null> {
    return this.#to("getByName").getByName(name);
  }

  list(options?: { includeRevoked?: boolean }): AsyncIterable<KeyRecord> {
    return this.#to("list").list(options);
  }

  dueKeys(now: Date): AsyncIterable<number> {
    return this.#to("dueKeys").dueKeys(now);
  }

  predecessors(id: number): AsyncIterable<KeyRecord> {
    return this.#to("predecessors").predecessors(id);
  }

  audit(options?: { keyId?: number }): AsyncIterable<AuditEntry> {
    return this.#to("audit").audit(options);
  }

  revision(): Promise<bigint> {
    return this.#to("revision").revision();
  }

  keyHashes(
    options?: { afterId?: number },
  ): AsyncIterable<{ id: number; hash: string }> {
    return this.#to("keyHashes").keyHashes(options);
  }

  importRevision(): Promise<bigint> {
    return this.#to("importRevision").importRevision();
  }

  exportAll(): AsyncIterable<ExportItem> {
    return exportItems(this.#to("exportAll"));
  }

  create(input: NewKeyInput, options: ChangeOptions): Promise<KeyRecord> {
    return this.#authenticating(
      "create",
      (draft) => createKey(draft, input, options),
    );
  }

  revoke(id: number, options: RevokeOptions): Promise<RevokeResult> {
    return this.#authenticating(
      "revoke",
      (draft) => revokeKey(draft, id, options),
    );
  }

  rotate(
    id: number,
    replacement: Pick<NewKeyInput, "hash" | "hint" | "expiresAt">,
    options: RotateOptions,
  ): Promise<RotateResult> {
    return this.#authenticating(
      "rotate",
      (draft) => rotateKey(draft, id, { ...options, replacement }),
    );
  }

  retire(id: number, options: RetireOptions): Promise<RevokeResult> {
    return this.#authenticating(
      "retire",
      (draft) => retireKey(draft, id, options),
    );
  }

  setAllowFrom(
    id: number,
    allowFrom: string[] | null,
    options: ChangeOptions,
  ): Promise<{ record: KeyRecord; changed: boolean }> {
    return this.#authenticating(
      "setAllowFrom",
      (draft) => restrictKey(draft, id, { ...options, allowFrom }),
    );
  }

  setRateLimit(
    id: number,
    rateLimit: RateLimit | null,
    options: ChangeOptions,
  ): Promise<
    { record: KeyRecord; changed: boolean; partner: KeyRecord | null }
  > {
    return this.#authenticating(
      "setRateLimit",
      (draft) => limitKey(draft, id, { ...options, rateLimit }),
    );
  }

  importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<{ keys: number; audit: number }> {
    return this.#settle(this.#to("importAll").importAll(items, options));
  }

  abortImport(options: ChangeOptions): Promise<boolean> {
    return this.#settle(this.#to("abortImport").abortImport(options));
  }

  async markExposed(id: number, options: ExposeOptions): Promise<boolean> {
    const change = await this.#to("markExposed").change(
      { name: "markExposed", alters: "usage" },
      (draft) => exposeKey(draft, id, options),
    );
    return change.quiet();
  }

  async recordNetworkUses(
    uses: Iterable<{ id: number; network: string; at: Date }>,
  ): Promise<{ id: number; network: string }[]> {
    this.#call("recordNetworkUses");
    const added: { id: number; network: string }[] = [];
    for (const [id, group] of byKey(uses)) {
      // A note is an audit line, and one commit has a size limit (Deno KV:
      // 1,000 mutations), so a key's notes go in changes of a bounded size.
      for (let i = 0; i < group.length; i += NOTES_PER_CHANGE) {
        const change = await quietly(this.#backend.change(
          { name: "recordNetworkUses", alters: "usage" },
          (draft) =>
            noteNetworks(draft, id, group.slice(i, i + NOTES_PER_CHANGE)),
        ));
        for (const network of change?.quiet() ?? []) {
          added.push({ id, network });
        }
      }
    }
    return added;
  }

  async recordRefusedUses(
    uses: Iterable<{ id: number; address: string; at: Date }>,
  ): Promise<void> {
    this.#call("recordRefusedUses");
    for (const [id, group] of byKey(uses)) {
      await quietly(this.#backend.change(
        { name: "recordRefusedUses", alters: "usage" },
        (draft) => noteRefused(draft, id, group),
      ));
    }
  }

  async noteRateLimited(id: number, at: Date): Promise<boolean> {
    this.#call("noteRateLimited");
    const change = await quietly(this.#backend.change(
      { name: "noteRateLimited", alters: "usage" },
      (draft) => noteRateLimited(draft, id, at),
    ));
    return change?.quiet() ?? false;
  }

  async noteExpiring(
    id: number,
    options: { now: Date; days: readonly number[] },
  ): Promise<number | null> {
    this.#call("noteExpiring");
    const change = await quietly(this.#backend.change(
      { name: "noteExpiring", alters: "usage" },
      (draft) => noteExpiring(draft, id, options),
    ));
    return change?.quiet() ?? null;
  }

  recordLastUsed(uses: Iterable<{ id: number; at: Date }>): Promise<void> {
    return this.#to("recordLastUsed").recordLastUsed(latestUses(uses));
  }

  async registerInstance(info: InstanceInfo): Promise<string> {
    const backend = this.#to("registerInstance");
    // Unconditional: it cannot conflict, so it always has a version.
    return (await backend.putInstance(storedInstance(info)))!;
  }

  renewInstance(info: InstanceInfo, version: string): Promise<string | null> {
    return this.#to("renewInstance").putInstance(storedInstance(info), {
      version,
    });
  }

  pollInstance(
    id: string,
  ): Promise<{ revision: bigint; version: string | null }> {
    return this.#to("pollInstance").pollInstance(id);
  }

  async instances(): Promise<InstanceRecord[]> {
    return (await this.#to("instances").readInstances()).map(readRegistration);
  }

  removeInstance(id: string, options?: { version?: string }): Promise<boolean> {
    return this.#to("removeInstance").removeInstance(id, options);
  }

  changesSince(revision: bigint): Promise<KeyChanges> {
    return this.#to("changesSince").changesSince(revision);
  }

  close(): Promise<void> {
    return this.#to("close").close();
  }
}

/** A usage note's change, or null while an import is unfinished: notes are best effort. */
async function quietly<T>(
  change: Promise<Committed<T, "usage">>,
): Promise<Committed<T, "usage"> | null> {
  try {
    return await change;
  } catch (error) {
    if (error instanceof ImportStateError) return null;
    throw error;
  }
}
