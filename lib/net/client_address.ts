/**
 * Who the client is, for lock-out and the request log.
 *
 * @module
 */

import {
  type Cidr,
  cidrContains,
  formatCidr,
  formatIp,
  networkOf,
  parseIp,
} from "./ip.ts";

const IPV4_TEXT = /^\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}$/;

export interface ClientAddressOptions {
  /** Empty: the header is ignored and the client is the TCP peer. */
  trustedProxies: readonly Cidr[];
}

/** A socket request that names no client: nginx as deploy/nginx.conf has it always names one. */
const UNIX_CLIENT = "unix";

/**
 * The client's address. The TCP peer, unless the peer is a trusted proxy:
 * then `X-Forwarded-For` is read from the right, skipping every entry that
 * is itself a trusted proxy, and the first entry that is not is the client.
 * Entries left of it are whatever the client chose to send, so they are
 * never believed; a direct client's header is never read at all, so nobody
 * can lock out someone else, or dodge a lock, by forging it. A peer on a
 * Unix socket is a proxy by construction (the socket file's permissions
 * decide who may connect) and is read like a trusted one.
 */
export function clientAddress(
  request: Request,
  info: Deno.ServeHandlerInfo,
  options: ClientAddressOptions,
): string {
  const unix = info.remoteAddr.transport === "unix";
  const host = unix ? "" : (info.remoteAddr as Deno.NetAddr).hostname ?? "";
  const forwarded = !unix && options.trustedProxies.length === 0
    ? null
    : request.headers.get("x-forwarded-for");
  // Parsing the peer and the header cost as much as the rest of the key
  // check (about 1.5 µs); the answer depends on nothing else, and the same
  // few pairs come again and again, from a proxy above all.
  const seen = unix
    ? `unix ${forwarded ?? ""}`
    : forwarded === null
    ? host
    : `${host} ${forwarded}`;
  let known = _answers.get(options);
  if (known === undefined) _answers.set(options, known = new Map());
  const answer = known.get(seen);
  if (answer !== undefined) return answer;
  let client: string;
  if (unix) {
    client = _forwardedClient(null, forwarded, options) ?? UNIX_CLIENT;
  } else {
    const peer = normalize(host);
    client = options.trustedProxies.length === 0
      ? peer
      : _clientAddress(peer, forwarded, options);
  }
  // Bounded in entries and in bytes: a flood of forged headers only
  // empties it, and a long header is answered but not kept.
  if (seen.length <= ANSWER_KEY_MAX) {
    if (known.size >= ANSWERS_KEPT) known.clear();
    known.set(seen, client);
  }
  return client;
}

const _answers = new WeakMap<ClientAddressOptions, Map<string, string>>();
const ANSWERS_KEPT = 4096;
const ANSWER_KEY_MAX = 200;

function _trusted(
  address: ReturnType<typeof parseIp>,
  options: ClientAddressOptions,
): boolean {
  return address !== null &&
    options.trustedProxies.some((cidr) => cidrContains(cidr, address));
}

function _clientAddress(
  peer: string,
  forwarded: string | null,
  options: ClientAddressOptions,
): string {
  const hop = parseIp(peer);
  if (!_trusted(hop, options)) return peer;
  return _forwardedClient(hop, forwarded, options) ?? formatIp(hop!);
}

/** The rightmost untrusted `X-Forwarded-For` entry after hop `hop` (null: a socket's proxy); null if none. */
function _forwardedClient(
  hop: ReturnType<typeof parseIp>,
  forwarded: string | null,
  options: ClientAddressOptions,
): string | null {
  const chain = forwarded?.split(",") ?? [];
  for (let i = chain.length - 1; i >= 0; i--) {
    const entry = parseIp(withoutPort(chain[i].trim()));
    // Junk where a proxy's entry should be: the request did not come through
    // the proxies as configured, so the last address they vouch for stands.
    if (entry === null) break;
    hop = entry;
    if (!_trusted(entry, options)) break;
  }
  return hop === null ? null : formatIp(hop);
}

/** The address, or for IPv6 its /64, which one host typically owns and could rotate through. */
export function lockoutKey(address: string): string {
  if (!address.includes(":")) return address;
  const parsed = parseIp(address);
  return parsed === null ? address : formatCidr(networkOf(parsed, 64));
}

/** /24 or /48: the budget that holds when failures are spread over a network. */
export function networkKey(lockout: string): string {
  // The common case, on every failure: dotted IPv4 needs no parsing.
  if (IPV4_TEXT.test(lockout)) {
    return `${lockout.slice(0, lockout.lastIndexOf("."))}.0/24`;
  }
  const parsed = parseIp(lockout.replace(/\/64$/, ""));
  if (parsed === null) return lockout;
  return formatCidr(networkOf(parsed, parsed.family === 4 ? 24 : 48));
}

/** Some proxies write `1.2.3.4:5678` or `[::1]:5678`: the port is not the client. */
function withoutPort(entry: string): string {
  const v4 = /^(\d+\.\d+\.\d+\.\d+):\d{1,5}$/.exec(entry);
  if (v4) return v4[1];
  const v6 = /^\[([^\]]+)\]:\d{1,5}$/.exec(entry);
  return v6 ? v6[1] : entry;
}

/** An address as written by a socket, lower case; an IPv4 client of a dual-stack one as a.b.c.d. */
export function normalize(address: string): string {
  return address.toLowerCase().replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, "$1");
}
