/**
 * The store a change was made in, as the console names it: on every line
 * that changes a key, as the `store` field of `--json`, and in the one
 * warning of a change no running server will see.
 *
 * Whether a server uses the store is read after the change, from its
 * registrations: a change returns only once every registered server has
 * confirmed it or lost its lease, and the wait removes each registration
 * whose lease ran out. What is still listed then, renewed at least once and
 * readable (the rule lib/auth/peers.ts counts servers by), is a server that
 * confirmed this change or started since. None at all: the warning.
 *
 * @module
 */

import { type StoreDescription, storeName } from "../store/location.ts";
import type { KeyStore } from "../store/types.ts";
import type { Context } from "./command.ts";
import { report } from "./_output.ts";

/** `in the store /srv/keys.db`, for a line that says what changed. */
export function inStore(
  ctx: Pick<Context, "where">,
  preposition: "in" | "into" = "in",
): string {
  return `${preposition} the store ${storeName(ctx.where)}`;
}

/** The `store` field of a changing command's `--json` value. */
export function storeField(
  ctx: Pick<Context, "where">,
): { store: StoreDescription } {
  return { store: ctx.where };
}

/**
 * How many servers use the store, by the rule above; null when the store
 * cannot list them (the change itself is made and reported either way).
 */
export async function runningServers(
  store: Pick<KeyStore, "instances">,
): Promise<number | null> {
  try {
    const listed = await store.instances();
    return listed.filter((one) => !one.broken && one.acked >= 0n).length;
  } catch {
    return null;
  }
}

/**
 * Says once, on stderr, that no server uses the store the command changed,
 * naming it, with what follows for the key (`consequence`): a console and
 * servers started with different DENO_KV_PATH or DATABASE_URL otherwise
 * only meet at the integrator's first 401.
 */
export async function warnWithoutServer(
  ctx: Pick<Context, "store" | "where">,
  consequence: string,
): Promise<void> {
  if (await runningServers(ctx.store) !== 0) return;
  report(
    `No server is running on this store (${
      storeName(ctx.where)
    }); a server started with another DENO_KV_PATH or DATABASE_URL ${consequence}`,
  );
}

/** What a server on another store makes of a new key. */
export const NEW_KEY = "answers 401 for this key";

/** What a server on another store makes of an import's keys. */
export const IMPORTED_KEYS = "answers 401 for the imported keys";

/** What a server on another store makes of any other change. */
export const OTHER_CHANGE = "does not see this change";
