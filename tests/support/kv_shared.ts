/**
 * One Deno KV file opened by each "server" separately, as processes do: the
 * lease tests' shared store on Deno KV.
 *
 * @module
 */

import { type KvKeyStore, openKvStore } from "../../lib/store/kv.ts";
import type { KeyService } from "../../lib/store/keys.ts";

/** A fresh KV file; disposing it closes every store opened on it and removes it. */
export async function sharedKvFile(): Promise<
  { open(): Promise<KeyService> } & AsyncDisposable
> {
  const dir = await Deno.makeTempDir();
  const opened: KvKeyStore[] = [];
  return {
    async open() {
      const store = await openKvStore(`${dir}/keys.db`);
      opened.push(store);
      return store;
    },
    async [Symbol.asyncDispose]() {
      for (const store of opened) await store.close().catch(() => {});
      await Deno.remove(dir, { recursive: true });
    },
  };
}
