/**
 * The store a change was made in, as named, and the one warning of a change no
 * running server will see. A change returns once every registered server
 * confirmed it or lost its lease, so a server still listed, renewed and
 * readable (lib/auth/peers.ts) confirmed it or started since.
 *
 * @module
 */

import { type StoreDescription, storeName } from "../store/location.ts";
import { hasRenewed } from "../store/registrations.ts";
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
 * Says once on stderr that no server uses the changed store: otherwise a console
 * and servers on different DENO_KV_PATH/DATABASE_URL meet at the first 401.
 */
export async function warnWithoutServer(
  ctx: Pick<Context, "store" | "where">,
  consequence: string,
): Promise<void> {
  // A store that cannot list its servers warns of nothing.
  try {
    const listed = await ctx.store.instances();
    if (listed.some(hasRenewed)) return;
  } catch {
    return;
  }
  report(
    `No server is running on this store (${
      storeName(ctx.where)
    }); a server started with another DENO_KV_PATH or DATABASE_URL ${consequence}`,
  );
}

// What a server on another store makes of a new key, an import, any other change.
export const NEW_KEY = "answers 401 for this key";
export const IMPORTED_KEYS = "answers 401 for the imported keys";
export const OTHER_CHANGE = "does not see this change";
