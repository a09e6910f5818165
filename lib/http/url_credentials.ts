/**
 * Credentials in URLs: a key in the path or the query, in any spelling and
 * with or without its prefix, or a query parameter named like a credential. Such a URL is refused on every
 * route, and nothing that logs a path may show the key.
 *
 * @module
 */

import { decodeAsciiEscapes, stillEscaped } from "../util/ascii_escapes.ts";
import { KEY_PATTERN, unprefixedKeysIn } from "../auth/api_key.ts";

/** Query parameter names that mean "a credential", compared without case, `-` or `_`. */
const CREDENTIAL_NAMES = new Set([
  "apikey",
  "key",
  "token",
  "xapikey",
  "accesstoken",
]);
const KEY_ANYWHERE = new RegExp(KEY_PATTERN.source, "g");

/** True when the path or the query carries a credential. */
export function urlCarriesCredential(path: string, query: string): boolean {
  return pathCarriesKey(path) ||
    (query !== "" && queryCarriesCredential(query));
}

/** The key-shaped strings of a URL, decoded: the first few, for marking them exposed. */
export function keysInUrl(
  path: string,
  query: string,
  options: { most: number },
): string[] {
  const text = `${urlText(path)} ${urlText(query)}`;
  return [...text.match(KEY_ANYWHERE) ?? [], ...unprefixedKeysIn(text)]
    .slice(0, options.most);
}

/**
 * A run of a key's characters this long may be most of a key (cut short,
 * without its prefix, in another case, or split across segments), and the
 * checksum of the last six is public: not for a log line, though not
 * refused as a key either. No route has one.
 */
const KEY_FRAGMENT = /[0-9A-Za-z]{16}/;

/**
 * Letters and digits in all, across segments and separators: a key split
 * into short segments (`/isk_AbCd/EfGh/…`, `;`, `.`) is this many or more.
 */
const KEY_CHARACTERS = /[0-9A-Za-z]/g;
const SPREAD_LIMIT = 16;

/**
 * A path fit for a log line: a route of `routes` as it is; any other path
 * withheld whole when it holds a key in any spelling, a run of 16 letters
 * and digits, or 16 of them in all however they are split, which is what
 * most of a key would take (and its checksum is public, so the rest
 * follows). Paths that match no route are scanners' and typos': short ones
 * are still logged as sent.
 */
export function loggablePath(
  path: string,
  options: { routes?: ReadonlySet<string> } = {},
): string {
  if (options.routes?.has(path)) return path;
  if (pathCarriesKey(path)) return "[redacted: a key in the path]";
  const text = path.includes("%") ? urlText(path) : path;
  const fragment = KEY_FRAGMENT.test(path) || KEY_FRAGMENT.test(text) ||
    (text.match(KEY_CHARACTERS)?.length ?? 0) >= SPREAD_LIMIT;
  return fragment ? "[redacted: a long token in the path]" : path;
}

/** A run as long as a key's body: what a key without its prefix takes. */
const BODY_LENGTH_RUN = /[0-9A-Za-z]{36}/;

function pathCarriesKey(path: string): boolean {
  // Only a path with "isk_", an escape or a body-long run can hold a key;
  // most are routes.
  if (
    !path.includes("isk_") && !path.includes("%") &&
    !BODY_LENGTH_RUN.test(path)
  ) return false;
  return carriesKey(urlText(path));
}

/** A key, with or without its prefix, in decoded URL text. */
function carriesKey(text: string): boolean {
  // Escaped deeper than decoding goes: it may hide a key, so it counts as one.
  return KEY_PATTERN.test(text) || unprefixedKeysIn(text).length > 0 ||
    stillEscaped(text);
}

function queryCarriesCredential(query: string): boolean {
  for (const name of new URLSearchParams(query).keys()) {
    if (CREDENTIAL_NAMES.has(name.toLowerCase().replace(/[-_]/g, ""))) {
      return true;
    }
  }
  // A key in any name or value is a key in the decoded whole.
  return carriesKey(urlText(query));
}

/** The URL text as the key check reads it; `+` is a space in a query. */
function urlText(text: string): string {
  return decodeAsciiEscapes(text.replaceAll("+", " "));
}
