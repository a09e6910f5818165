/**
 * {@linkcode KeyStore} over any backend (lib/store/backend.ts): the one
 * implementation of the store contract. Reads and the instance registry
 * pass through to the backend's primitives; every change runs one of the
 * rules of `changes.ts` in the backend's atomic change, declared with what
 * it alters. A change that alters authentication returns only once the
 * store's {@linkcode Acknowledge} has settled it (lib/store/acknowledged.ts
 * waits for every server); a usage note returns at once.
 *
 * @module
 */

import type { StoreBackend } from "./backend.ts";
import {
  type Acknowledge,
  type AuthenticationChange,
  type ChangeKind,
  type Committed,
  NO_WAIT,
  type UsageChange,
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
import { changesIn } from "./feed.ts";
import { abortImportIn, importInto } from "./import.ts";
import { exportItems } from "./records.ts";
import { instancesIn, registerIn, renewIn } from "./registrations.ts";
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

/** Options of {@linkcode KeyService}. */
export interface KeyServiceOptions {
  /**
   * Settles every change that alters authentication before it returns;
   * without it, none waits (a store that no server answers from memory).
   */
  acknowledge?: Acknowledge;
  /** Hears of every call, by method: what the traffic costs the store. */
  onCall?: (method: keyof KeyStore) => void;
}

const authentication = (
  name: AuthenticationChange,
): ChangeKind<"authentication"> => ({ name, alters: "authentication" });
/** Network notes (audit lines) per change: well under any backend's commit limit. */
const NOTES_PER_CHANGE = 200;

const usage = (name: UsageChange): ChangeKind<"usage"> => ({
  name,
  alters: "usage",
});

/** The key store: the rules once, over one backend's primitives. */
export class KeyService implements KeyStore {
  #backend: StoreBackend;
  #options: KeyServiceOptions;
  #acknowledge: Acknowledge;
  #call: (method: keyof KeyStore) => void;
  /** Set when the backend can push a notice at every change. */
  onChange?: (listener: () => void) => Promise<() => Promise<void>>;

  constructor(backend: StoreBackend, options: KeyServiceOptions = {}) {
    this.#backend = backend;
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

  async #settle<T>(change: Promise<Committed<T, "authentication">>) {
    return await (await change).settle(this.#acknowledge);
  }

  async findByHash(hash: string): Promise<KeyRecord | null> {
    this.#call("findByHash");
    return (await this.#backend.findByHashAt(hash)).record;
  }

  findByHashAt(
    hash: string,
  ): Promise<
    { record: KeyRecord | null; revision: bigint; authRevision: bigint }
  > {
    this.#call("findByHashAt");
    return this.#backend.findByHashAt(hash);
  }

  get(id: number): Promise<KeyRecord | null> {
    this.#call("get");
    return this.#backend.get(id);
  }

  getByName(name: string): Promise<KeyRecord | null> {
    this.#call("getByName");
    return this.#backend.getByName(name);
  }

  list(options?: { includeRevoked?: boolean }): AsyncIterable<KeyRecord> {
    this.#call("list");
    return this.#backend.list(options);
  }

  dueKeys(now: Date): AsyncIterable<number> {
    this.#call("dueKeys");
    return this.#backend.dueKeys(now);
  }

  predecessors(id: number): AsyncIterable<KeyRecord> {
    this.#call("predecessors");
    return this.#backend.predecessors(id);
  }

  audit(options?: { keyId?: number }): AsyncIterable<AuditEntry> {
    this.#call("audit");
    return this.#backend.audit(options);
  }

  revision(): Promise<bigint> {
    this.#call("revision");
    return this.#backend.revision();
  }

  keyHashes(
    options?: { afterId?: number },
  ): AsyncIterable<{ id: number; hash: string }> {
    this.#call("keyHashes");
    return this.#backend.keyHashes(options);
  }

  importRevision(): Promise<bigint> {
    this.#call("importRevision");
    return this.#backend.importRevision();
  }

  exportAll(): AsyncIterable<ExportItem> {
    this.#call("exportAll");
    return exportItems(this.#backend);
  }

  create(input: NewKeyInput, options: ChangeOptions): Promise<KeyRecord> {
    this.#call("create");
    return this.#settle(
      this.#backend.change(
        authentication("create"),
        (draft) => createKey(draft, input, options),
      ),
    );
  }

  revoke(id: number, options: RevokeOptions): Promise<RevokeResult> {
    this.#call("revoke");
    return this.#settle(
      this.#backend.change(
        authentication("revoke"),
        (draft) => revokeKey(draft, id, options),
      ),
    );
  }

  rotate(
    id: number,
    replacement: Pick<NewKeyInput, "hash" | "hint" | "expiresAt">,
    options: RotateOptions,
  ): Promise<RotateResult> {
    this.#call("rotate");
    return this.#settle(
      this.#backend.change(
        authentication("rotate"),
        (draft) => rotateKey(draft, id, { ...options, replacement }),
      ),
    );
  }

  retire(id: number, options: RetireOptions): Promise<RevokeResult> {
    this.#call("retire");
    return this.#settle(
      this.#backend.change(
        authentication("retire"),
        (draft) => retireKey(draft, id, options),
      ),
    );
  }

  setAllowFrom(
    id: number,
    allowFrom: string[] | null,
    options: ChangeOptions,
  ): Promise<{ record: KeyRecord; changed: boolean }> {
    this.#call("setAllowFrom");
    return this.#settle(
      this.#backend.change(
        authentication("setAllowFrom"),
        (draft) => restrictKey(draft, id, { ...options, allowFrom }),
      ),
    );
  }

  setRateLimit(
    id: number,
    rateLimit: RateLimit | null,
    options: ChangeOptions,
  ): Promise<{ record: KeyRecord; changed: boolean }> {
    this.#call("setRateLimit");
    return this.#settle(
      this.#backend.change(
        authentication("setRateLimit"),
        (draft) => limitKey(draft, id, { ...options, rateLimit }),
      ),
    );
  }

  importAll(
    items: AsyncIterable<ExportItem>,
    options: ChangeOptions,
  ): Promise<{ keys: number; audit: number }> {
    this.#call("importAll");
    return this.#settle(importInto(this.#backend, items, options));
  }

  abortImport(options: ChangeOptions): Promise<boolean> {
    this.#call("abortImport");
    return this.#settle(abortImportIn(this.#backend, options));
  }

  async markExposed(id: number, options: ExposeOptions): Promise<boolean> {
    this.#call("markExposed");
    const change = await this.#backend.change(
      usage("markExposed"),
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
          usage("recordNetworkUses"),
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
        usage("recordRefusedUses"),
        (draft) => noteRefused(draft, id, group),
      ));
    }
  }

  recordLastUsed(uses: Iterable<{ id: number; at: Date }>): Promise<void> {
    this.#call("recordLastUsed");
    return this.#backend.recordLastUsed(latestUses(uses));
  }

  registerInstance(info: InstanceInfo): Promise<string> {
    this.#call("registerInstance");
    return registerIn(this.#backend, info);
  }

  renewInstance(info: InstanceInfo, version: string): Promise<string | null> {
    this.#call("renewInstance");
    return renewIn(this.#backend, info, { version });
  }

  pollInstance(
    id: string,
  ): Promise<{ revision: bigint; version: string | null }> {
    this.#call("pollInstance");
    return this.#backend.pollInstance(id);
  }

  instances(): Promise<InstanceRecord[]> {
    this.#call("instances");
    return instancesIn(this.#backend);
  }

  removeInstance(id: string, options?: { version?: string }): Promise<boolean> {
    this.#call("removeInstance");
    return this.#backend.removeInstance(id, options);
  }

  changesSince(revision: bigint): Promise<KeyChanges> {
    this.#call("changesSince");
    return changesIn(this.#backend, revision);
  }

  close(): Promise<void> {
    this.#call("close");
    return this.#backend.close();
  }
}

/**
 * A usage note's change, or null while an import is unfinished: notes are
 * best effort, and the keys they name may not survive the import.
 */
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
