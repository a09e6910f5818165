/**
 * Where a key went when not in `X-API-Key`: named on the 401's log line, never
 * its value. Read only for a request refused without that header, so valid
 * requests pay nothing; the client gets the same 401 either way.
 *
 * @module
 */

import { looksLikeApiKey } from "../auth/api_key.ts";
import { API_KEY_HEADER } from "./responses.ts";

/** Header names a hint may name; others are "another header", as a name may hold key pieces. */
const NAMED = new Map(
  [
    "Authorization",
    "Proxy-Authorization",
    "Api-Key",
    "Apikey",
    "Api_Key",
    "X-Api-Token",
    "X-Api-Secret",
    "X-Apikey",
    "X_Api_Key",
    "X-Auth-Token",
    "X-Access-Token",
    "X-Token",
    "X-Key",
    "Token",
    "Cookie",
  ].map((name) => [name.toLowerCase(), name]),
);

/** A key is 40 characters: the start of each value is enough, and bounds the work a hostile request costs. */
const READ_CHARACTERS = 256;
const READ_HEADERS = 64;

/** The hint for a 401 without `X-API-Key`, or `undefined` when no other header holds a key. */
export function misplacedKeyHint(headers: Headers): string | undefined {
  let read = 0;
  for (const [name, value] of headers) {
    if (++read > READ_HEADERS) break;
    const found = holdsKey(name, value.slice(0, READ_CHARACTERS));
    if (found === null) continue;
    const where = NAMED.get(name) ?? "another header";
    return found === "key"
      ? `a key was sent in ${where}, which is not read; send it in ${API_KEY_HEADER}`
      : `a Bearer credential was sent in ${where}, which is not read; send the key in ${API_KEY_HEADER}`;
  }
  return undefined;
}

function holdsKey(name: string, value: string): "key" | "bearer" | null {
  if (looksLikeApiKey(value)) return "key";
  if (name !== "authorization" && name !== "proxy-authorization") return null;
  const [scheme, credentials = ""] = value.trim().split(/\s+/, 2);
  if (/^basic$/i.test(scheme)) {
    try {
      return looksLikeApiKey(atob(credentials)) ? "key" : null;
    } catch {
      return null;
    }
  }
  return /^bearer$/i.test(scheme) && credentials !== "" ? "bearer" : null;
}
