/**
 * Credentials in URLs: a key in any spelling, with or without prefix, or a query
 * parameter named like one. Refused on every route; loggable_path.ts withholds them.
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

export function urlCarriesCredential(path: string, query: string): boolean {
  return pathCarriesKey(path) ||
    (query !== "" && queryCarriesCredential(query));
}

/** Decoded, for marking them exposed. */
export function keysInUrl(
  path: string,
  query: string,
  options: { most: number },
): string[] {
  const text = `${urlText(path)} ${urlText(query)}`;
  return [...text.match(KEY_ANYWHERE) ?? [], ...unprefixedKeysIn(text)]
    .slice(0, options.most);
}

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
