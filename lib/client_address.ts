/**
 * Who the client is, for lock-out and the request log.
 *
 * @module
 */

const IPV4 = /^\d{1,3}(\.\d{1,3}){3}$/;
const IPV6 = /^[0-9a-f:]+(:\d{1,3}(\.\d{1,3}){3})?$/i;

/**
 * The client's address: the TCP peer, or with `trustProxyHops` N > 0 the Nth
 * address from the right of X-Forwarded-For, which the Nth proxy appended.
 * Addresses left of it are whatever the client chose to send, so they are
 * never trusted; with N = 0 the header is ignored entirely, so nobody can
 * lock out someone else by forging it.
 */
export function clientAddress(
  request: Request,
  info: Deno.ServeHandlerInfo,
  options: { trustProxyHops: number },
): string {
  const peer = normalize((info.remoteAddr as Deno.NetAddr).hostname ?? "");
  if (options.trustProxyHops === 0) return peer;
  const chain = request.headers.get("x-forwarded-for")?.split(",") ?? [];
  const hop = chain[chain.length - options.trustProxyHops]?.trim() ?? "";
  const address = normalize(hop.replace(/^\[(.*)\]$/, "$1"));
  // A chain shorter than the proxies, or junk, means the request did not come
  // through them as configured: fall back to what the socket says.
  return IPV4.test(address) || (address.includes(":") && IPV6.test(address))
    ? address
    : peer;
}

/**
 * The key lock-out counts under: the address, or for IPv6 its /64, since one
 * host typically owns a whole /64 and could otherwise rotate through it.
 */
export function lockoutKey(address: string): string {
  if (!address.includes(":")) return address;
  const [head, tail = ""] = address.split("::");
  const left = head === "" ? [] : head.split(":");
  const right = tail === "" ? [] : tail.split(":");
  const groups = address.includes("::")
    ? [...left, ...Array(8 - left.length - right.length).fill("0"), ...right]
    : left;
  return groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, "")).join(":") +
    "::/64";
}

function normalize(address: string): string {
  // Dual-stack sockets report IPv4 clients as ::ffff:a.b.c.d.
  return address.toLowerCase().replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, "$1");
}
