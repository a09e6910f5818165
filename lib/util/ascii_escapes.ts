/**
 * Reading text the way a key-spotter must: a key is ASCII, so every `%XX`
 * of an ASCII character is decoded, again and again, however the rest is
 * escaped. A broken escape (`%zz`, `%FF`) elsewhere cannot stop `isk%5F…`
 * from being seen, and neither can encoding it twice (`%255F`).
 *
 * @module
 */

/** More layers than any honest client sends; each costs a pass over the text. */
export const MAX_LAYERS = 8;
const ASCII_ESCAPE = /%([0-7][0-9A-Fa-f])/g;

/**
 * Every ASCII `%XX` decoded, layer after layer, at most {@linkcode MAX_LAYERS}
 * deep, so a path escaped thousands of times costs eight passes at most.
 */
export function decodeAsciiEscapes(text: string): string {
  let out = text;
  for (let layer = 0; layer < MAX_LAYERS && out.includes("%"); layer++) {
    const next = out.replace(
      ASCII_ESCAPE,
      (_, hex: string) => String.fromCharCode(parseInt(hex, 16)),
    );
    if (next === out) break;
    out = next;
  }
  return out;
}

/** True when decoded text still holds an ASCII escape: nobody honest nests that deep. */
export function stillEscaped(decoded: string): boolean {
  return /%[0-7][0-9A-Fa-f]/.test(decoded);
}
