/**
 * IP addresses and CIDR ranges, parsed strictly: what decides whom a proxy
 * header is believed from must not guess. IPv4-mapped IPv6 is read as IPv4.
 *
 * @module
 */

export interface IpAddress {
  family: 4 | 6;
  bits: bigint;
}

export interface Cidr {
  family: 4 | 6;
  /** Host bits cleared. */
  network: bigint;
  prefix: number;
}

const IPV4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;
const WIDTH: Record<4 | 6, number> = { 4: 32, 6: 128 };

/** Brackets allowed; null when not an address. */
export function parseIp(text: string): IpAddress | null {
  const value = text.startsWith("[") && text.endsWith("]")
    ? text.slice(1, -1)
    : text;
  const v4 = parseIpv4(value);
  if (v4 !== null) return { family: 4, bits: v4 };
  const v6 = parseIpv6(value);
  if (v6 === null) return null;
  // ::ffff:0:0/96 is how a dual-stack socket shows an IPv4 peer.
  if (v6 >> 32n === 0xffffn) return { family: 4, bits: v6 & 0xffffffffn };
  return { family: 6, bits: v6 };
}

/** Dotted IPv4, or RFC 5952 IPv6. */
export function formatIp(address: IpAddress): string {
  if (address.family === 4) {
    return [24n, 16n, 8n, 0n].map((s) => String((address.bits >> s) & 255n))
      .join(".");
  }
  const groups = Array.from(
    { length: 8 },
    (_, i) => Number((address.bits >> BigInt(112 - 16 * i)) & 0xffffn),
  );
  // RFC 5952: the longest run of two or more zero groups becomes "::".
  let best = { start: -1, length: 1 };
  for (let i = 0; i < 8;) {
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.length) best = { start: i, length: j - i };
    i = j === i ? i + 1 : j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.start === -1) return hex.join(":");
  return `${hex.slice(0, best.start).join(":")}::${
    hex.slice(best.start + best.length).join(":")
  }`;
}

export function networkOf(address: IpAddress, prefix: number): Cidr {
  const width = WIDTH[address.family];
  const bits = Math.min(prefix, width);
  const mask = ((1n << BigInt(bits)) - 1n) << BigInt(width - bits);
  return { family: address.family, network: address.bits & mask, prefix: bits };
}

export function formatCidr(cidr: Cidr): string {
  return `${
    formatIp({ family: cidr.family, bits: cidr.network })
  }/${cidr.prefix}`;
}

/** Why a text is not a range, for a message that names the part to fix. */
export type CidrProblem =
  | "not_an_address"
  /** `010.0.0.0/8`, which some programs read as octal. */
  | "leading_zero"
  | "prefix_malformed"
  | "prefix_too_long"
  | "host_bits_set";

export function cidrProblem(text: string): CidrProblem | null {
  const slash = text.indexOf("/");
  const written = slash === -1 ? text : text.slice(0, slash);
  const address = parseIp(written);
  if (address === null) {
    const bare = withoutLeadingZeros(written);
    return bare !== written && parseIp(bare) !== null
      ? "leading_zero"
      : "not_an_address";
  }
  if (slash !== -1) {
    const raw = text.slice(slash + 1);
    if (!/^(0|[1-9]\d{0,2})$/.test(raw)) return "prefix_malformed";
    const mapped = address.family === 4 && text.includes(":");
    if (Number(raw) - (mapped ? 96 : 0) > WIDTH[address.family]) {
      return "prefix_too_long";
    }
    if (mapped && Number(raw) < 96) return "prefix_too_long";
  }
  return parseCidr(text) === null ? "host_bits_set" : null;
}

/** `010.0.0.0/8` as `10.0.0.0/8`: for a message's suggestion, never read as an address. */
export function withoutLeadingZeros(text: string): string {
  const slash = text.indexOf("/");
  const written = slash === -1 ? text : text.slice(0, slash);
  // The IPv4 part is the last item of an IPv6 address, or the whole.
  const start = written.lastIndexOf(":") + 1;
  const v4 = written.slice(start).split(".").map((part) =>
    /^\d+$/.test(part) ? part.replace(/^0+(?=\d)/, "") : part
  ).join(".");
  return written.slice(0, start) + v4 + text.slice(written.length);
}

/** A bare address is a range of one; null when malformed or host bits are set (a typo, usually). */
export function parseCidr(text: string): Cidr | null {
  const slash = text.indexOf("/");
  const address = parseIp(slash === -1 ? text : text.slice(0, slash));
  if (address === null) return null;
  const width = WIDTH[address.family];
  let prefix: number = width;
  if (slash !== -1) {
    const raw = text.slice(slash + 1);
    // No leading zero: /032 is not a way of writing /32 anyone means.
    if (!/^(0|[1-9]\d{0,2})$/.test(raw)) return null;
    prefix = Number(raw);
    // A mapped IPv4 range written in IPv6 form counts its prefix in IPv6 bits.
    if (address.family === 4 && text.includes(":")) prefix -= 96;
    if (prefix < 0 || prefix > width) return null;
  }
  const range = networkOf(address, prefix);
  return range.network === address.bits ? range : null;
}

export function cidrContains(cidr: Cidr, address: IpAddress): boolean {
  return cidr.family === address.family &&
    networkOf(address, cidr.prefix).network === cidr.network;
}

function parseIpv4(text: string): bigint | null {
  const match = IPV4.exec(text);
  if (match === null) return null;
  let bits = 0n;
  for (const part of match.slice(1)) {
    // Leading zeros are refused: some parsers read them as octal.
    if (part.length > 1 && part.startsWith("0")) return null;
    const byte = Number(part);
    if (byte > 255) return null;
    bits = (bits << 8n) | BigInt(byte);
  }
  return bits;
}

function parseIpv6(text: string): bigint | null {
  if (!/^[0-9A-Fa-f:.]+$/.test(text) || text.length > 45) return null;
  const halves = text.split("::");
  if (halves.length > 2) return null;
  const groupsOf = (part: string): bigint[] | null => {
    if (part === "") return [];
    const out: bigint[] = [];
    const items = part.split(":");
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if (i === items.length - 1 && item.includes(".")) {
        const v4 = parseIpv4(item);
        if (v4 === null) return null;
        out.push(v4 >> 16n, v4 & 0xffffn);
      } else if (/^[0-9A-Fa-f]{1,4}$/.test(item)) {
        out.push(BigInt(parseInt(item, 16)));
      } else return null;
    }
    return out;
  };
  const left = groupsOf(halves[0]);
  const right = halves.length === 2 ? groupsOf(halves[1]) : [];
  if (left === null || right === null) return null;
  const missing = 8 - left.length - right.length;
  if (halves.length === 2 ? missing < 1 : missing !== 0) return null;
  const groups = [...left, ...Array(missing).fill(0n), ...right];
  return groups.reduce((bits, group) => (bits << 16n) | group, 0n);
}
