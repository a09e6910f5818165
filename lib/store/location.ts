/**
 * Where keys are kept, as the configuration names it: apart from the opener,
 * which loads each store, so a store may name its own default without an
 * import cycle.
 * @module
 */

/** Where keys are kept: a Deno KV file (or URL), or a PostgreSQL database. */
export type StoreLocation =
  | { kind: "kv"; path: string }
  | { kind: "postgres"; url: string };

/** The KV file used when neither store variable is set. */
export const DEFAULT_KV_PATH = "./data/keys.db";

/**
 * A store as the console names it to a person or a script: the KV file as
 * an absolute path, or the PostgreSQL host, port and database. Never the
 * user's password, nor any other part of a URL's credentials or query.
 */
export type StoreDescription =
  | { kind: "kv"; path: string }
  | { kind: "postgres"; host: string; port: number; database: string };

/**
 * `location` as {@linkcode StoreDescription}: a relative KV path resolved
 * against `cwd` (the process's working folder unless given), so that two
 * consoles started in different folders name two files differently.
 */
export function describeStore(
  location: StoreLocation,
  options: { cwd?: () => string } = {},
): StoreDescription {
  if (location.kind === "postgres") {
    const url = new URL(location.url);
    // The database the driver connects to: the URL's, else the user's name.
    return {
      kind: "postgres",
      host: url.hostname.replace(/^\[(.*)\]$/, "$1"),
      port: Number(url.port || 5432),
      database: decodeURIComponent(url.pathname.slice(1)) ||
        decodeURIComponent(url.username),
    };
  }
  const { path } = location;
  if (path === ":memory:") return { kind: "kv", path };
  if (/^https?:\/\//i.test(path)) {
    // A remote KV: its address alone, without credentials or a query.
    const url = new URL(path);
    return { kind: "kv", path: url.origin + url.pathname };
  }
  const cwd = options.cwd ?? (() => Deno.cwd());
  return { kind: "kv", path: absolute(path, cwd) };
}

/** One line's name of a store: `/srv/keys.db` or `PostgreSQL db.internal:5432/keys`. */
export function storeName(store: StoreDescription): string {
  if (store.kind === "kv") return store.path;
  const host = store.host.includes(":") ? `[${store.host}]` : store.host;
  return `PostgreSQL ${host}:${store.port}/${store.database}`;
}

/** `path` made absolute against `cwd()`, its `.` and `..` parts resolved. */
function absolute(path: string, cwd: () => string): string {
  let full = path;
  if (!path.startsWith("/")) {
    try {
      full = `${cwd()}/${path}`;
    } catch {
      // No working folder to read (it was removed): the path as given.
      return path;
    }
  }
  const parts: string[] = [];
  for (const part of full.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  return "/" + parts.join("/");
}
