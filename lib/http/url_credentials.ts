/**
 * Credentials in URLs: a key in the path or the query, in any spelling, or
 * a query parameter named like a credential. Such a URL is refused on every
 * route, and nothing that logs a path may show the key.
 *
 * @module
 */

import { decodeAsciiEscapes, stillEscaped } from "../_ascii_escapes.ts";
import { KEY_PATTERN } from "../api_key.ts";

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
  return (text.match(KEY_ANYWHERE) ?? []).slice(0, options.most);
}

/**
 * A run of a key's characters this long may be most of a key (cut short,
 * without its prefix, in another case, or split across segments), and the
 * checksum of the last six is public: not for a log line, though not
 * refused as a key either. No route has one.
 */
const KEY_FRAGMENT = /[0-9A-Za-z]{16}/;

/** A path fit for a log line: withheld whole when it holds a key in any spelling, or what may be most of one. */
export function loggablePath(path: string): string {
  if (pathCarriesKey(path)) return "[redacted: a key in the path]";
  const fragment = KEY_FRAGMENT.test(path) ||
    (path.includes("%") && KEY_FRAGMENT.test(urlText(path)));
  return fragment ? "[redacted: a long token in the path]" : path;
}

function pathCarriesKey(path: string): boolean {
  // Only a path with "isk_" or an escape can hold a key; most are routes.
  if (!path.includes("isk_") && !path.includes("%")) return false;
  const text = urlText(path);
  // Escaped deeper than decoding goes: it may hide a key, so it counts as one.
  return KEY_PATTERN.test(text) || stillEscaped(text);
}

function queryCarriesCredential(query: string): boolean {
  for (const name of new URLSearchParams(query).keys()) {
    if (CREDENTIAL_NAMES.has(name.toLowerCase().replace(/[-_]/g, ""))) {
      return true;
    }
  }
  // A key in any name or value is a key in the decoded whole.
  const text = urlText(query);
  return KEY_PATTERN.test(text) || stillEscaped(text);
}

/** The URL text as the key check reads it; `+` is a space in a query. */
function urlText(text: string): string {
  return decodeAsciiEscapes(text.replaceAll("+", " "));
}
