/**
 * Where a webhook may be sent: HTTPS, or plain HTTP to this host only
 * (127.0.0.0/8, ::1, localhost), where nobody on the way can read a payload.
 * @module
 */

/** Why a URL was refused: `not_a_url`, or `https_required` for plain HTTP elsewhere. */
export class EndpointUrlError extends Error {
  override name = "EndpointUrlError";

  constructor(readonly code: "not_a_url" | "https_required", message: string) {
    super(message);
  }
}

/**
 * The longest URL, in characters: every change reads the endpoint list, one
 * entry, which must stay well within Deno KV's 64 KiB for the most endpoints.
 */
export const URL_MAX = 2048;

/** The URL, checked; throws {@linkcode EndpointUrlError} naming the fix. */
export function endpointUrl(text: string): URL {
  if (text.length > URL_MAX) {
    throw new EndpointUrlError(
      "not_a_url",
      `A webhook URL has at most ${URL_MAX} characters, not ${text.length}; give the receiver a shorter path`,
    );
  }
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new EndpointUrlError(
      "not_a_url",
      `${
        JSON.stringify(text)
      } is not a URL; give one such as https://hooks.example.com/keys`,
    );
  }
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new EndpointUrlError(
      "not_a_url",
      `A webhook URL starts with https://, not ${url.protocol}//`,
    );
  }
  if (url.username !== "" || url.password !== "") {
    throw new EndpointUrlError(
      "not_a_url",
      "A webhook URL carries no user or password: receivers check the signature instead",
    );
  }
  if (url.protocol === "http:" && !isLoopback(url.hostname)) {
    throw new EndpointUrlError(
      "https_required",
      `Webhooks are sent over HTTPS except to this host (127.0.0.0/8, ::1, localhost): use https://${url.host}${url.pathname}${url.search}`,
    );
  }
  if (url.href.length > URL_MAX) {
    throw new EndpointUrlError(
      "not_a_url",
      `A webhook URL has at most ${URL_MAX} characters, not ${url.href.length} once encoded; give the receiver a shorter path`,
    );
  }
  return url;
}

/** Whether a URL's hostname is this host: localhost, 127.0.0.0/8 or ::1. */
export function isLoopback(hostname: string): boolean {
  const host = hostname.toLowerCase();
  if (host === "localhost" || host === "[::1]") return true;
  const v4 = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  return v4 !== null && v4.slice(1).every((part) => Number(part) <= 255);
}

/**
 * Whether `url` is on a host that WEBHOOK_HOSTS grants: `host` grants every
 * port, `host:port` that one, as `--allow-net` reads them. The start task
 * also grants the server its own listeners and the store's address, which
 * Deno cannot tell from a receiver's, so the sender asks this first.
 */
export function grantedHost(url: URL, hosts: readonly string[]): boolean {
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
  return hosts.some((entry) => {
    const match = /^(.+?)(?::(\d{1,5}))?$/.exec(entry);
    if (match === null) return false;
    let hostname: string;
    try {
      // Written as the URL writes its own: lower case, IPv6 shortest.
      hostname = new URL(`http://${match[1]}`).hostname;
    } catch {
      return false;
    }
    return hostname === url.hostname &&
      (match[2] === undefined || Number(match[2]) === port);
  });
}
