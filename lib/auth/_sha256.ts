/**
 * SHA-256 (FIPS 180-4), synchronously. Not `node:crypto`: the Node layer
 * cost about 8 MB for this one call; not `crypto.subtle`: a promise and a
 * trip through the runtime per request. On a key (one block) this measured
 * as fast as `createHash`.
 *
 * @module
 */

// FIPS 180-4 4.2.2 and 5.3.3: the first 32 bits of the fractional parts of
// the cube roots (K) and square roots (INITIAL) of the first 64 primes.
const PRIMES: number[] = [];
for (let n = 2; PRIMES.length < 64; n++) {
  if (PRIMES.every((p) => n % p !== 0)) PRIMES.push(n);
}
const fraction = (x: number) => ((x - Math.floor(x)) * 2 ** 32) | 0;
const K = Int32Array.from(PRIMES, (p) => fraction(Math.cbrt(p)));
const INITIAL = PRIMES.slice(0, 8).map((p) => fraction(Math.sqrt(p)));
const HEX = Array.from(
  { length: 256 },
  (_, i) => i.toString(16).padStart(2, "0"),
);

// Reused by every call: the function never yields, so no two calls share them.
const words = new Int32Array(64);
const state = new Int32Array(8);
const encoder = new TextEncoder();

/** Of `text` as UTF-8, in lowercase hex. */
export function sha256Hex(text: string): string {
  state.set(INITIAL);
  if (!shortAscii(text)) {
    const bytes = encoder.encode(text);
    // The message, a 0x80 byte, zeros, and its length in bits: whole blocks.
    const padded = new Uint8Array(Math.ceil((bytes.length + 9) / 64) * 64);
    padded.set(bytes);
    padded[bytes.length] = 0x80;
    const view = new DataView(padded.buffer);
    const bits = bytes.length * 8;
    view.setUint32(padded.length - 8, Math.floor(bits / 2 ** 32));
    view.setUint32(padded.length - 4, bits >>> 0);
    for (let offset = 0; offset < padded.length; offset += 64) {
      for (let i = 0; i < 16; i++) words[i] = view.getInt32(offset + i * 4);
      compress();
    }
  }
  let out = "";
  for (let i = 0; i < 8; i++) {
    const word = state[i];
    out += HEX[(word >>> 24) & 0xff] + HEX[(word >>> 16) & 0xff] +
      HEX[(word >>> 8) & 0xff] + HEX[word & 0xff];
  }
  return out;
}

/** At most 55 ASCII characters (one block) straight from their codes; false for other text. */
function shortAscii(text: string): boolean {
  const length = text.length;
  if (length > 55) return false;
  words.fill(0, 0, 16);
  for (let i = 0; i < length; i++) {
    const code = text.charCodeAt(i);
    if (code > 0x7f) return false;
    words[i >> 2] |= code << (24 - 8 * (i & 3));
  }
  words[length >> 2] |= 0x80 << (24 - 8 * (length & 3));
  words[15] = length * 8;
  compress();
  return true;
}

/** One block, its 16 words in `words`, into `state`. */
function compress(): void {
  for (let i = 16; i < 64; i++) {
    const w15 = words[i - 15];
    const w2 = words[i - 2];
    const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^
      (w15 >>> 3);
    const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^
      (w2 >>> 10);
    words[i] = (words[i - 16] + s0 + words[i - 7] + s1) | 0;
  }
  let a = state[0], b = state[1], c = state[2], d = state[3];
  let e = state[4], f = state[5], g = state[6], h = state[7];
  for (let i = 0; i < 64; i++) {
    const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^
      ((e >>> 25) | (e << 7));
    const choice = (e & f) ^ (~e & g);
    const t1 = (h + s1 + choice + K[i] + words[i]) | 0;
    const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^
      ((a >>> 22) | (a << 10));
    const majority = (a & b) ^ (a & c) ^ (b & c);
    const t2 = (s0 + majority) | 0;
    h = g;
    g = f;
    f = e;
    e = (d + t1) | 0;
    d = c;
    c = b;
    b = a;
    a = (t1 + t2) | 0;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}
