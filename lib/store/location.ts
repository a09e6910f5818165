/**
 * Where keys are kept, as the configuration names it: kept apart from the
 * opener, which loads each store, so that a store may name its own default
 * without an import cycle.
 *
 * @module
 */

/** Where keys are kept: a Deno KV file (or URL), or a PostgreSQL database. */
export type StoreLocation =
  | { kind: "kv"; path: string }
  | { kind: "postgres"; url: string };

/** The KV file used when neither store variable is set. */
export const DEFAULT_KV_PATH = "./data/keys.db";
