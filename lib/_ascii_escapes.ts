/**
 * Reading text the way a key-spotter must: a key is ASCII, so every `%XX`
 * of an ASCII character is decoded, again and again, however the rest is
 * escaped. A broken escape (`%zz`, `%FF`) elsewhere cannot stop `isk%5F…`
 * from being seen, and neither can encoding it twice (`%255F`).
 *
 * @module
 */

/** `text` with every ASCII `%XX` decoded, up to four layers deep. */
export function decodeAsciiEscapes(text: string): string {
  let out = text;
  for (let round = 0; round < 4 && out.includes("%"); round++) {
    const next = out.replace(
      /%([0-7][0-9A-Fa-f])/g,
      (_, hex: string) => String.fromCharCode(parseInt(hex, 16)),
    );
    if (next === out) break;
    out = next;
  }
  return out;
}
