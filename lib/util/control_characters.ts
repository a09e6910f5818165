/**
 * Characters that make a terminal act instead of show: C0 (newline and tab
 * too, as every field shown is one line), DEL, C1 (many terminals obey CSI
 * U+009B like ESC [), U+2028, U+2029 and the bidirectional controls. Shown
 * in JSON's notation (`\u001b`), so text from `JSON.stringify` stays JSON
 * of the same value; a backslash is left as is, harmless as neither acts.
 *
 * @module
 */

const CONTROL =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
const CONTROLS = new RegExp(CONTROL.source, "g");

/** To refuse it as input. */
export function hasControlCharacters(text: string): boolean {
  return CONTROL.test(text);
}

/** Every character of the set as `\uXXXX`: safe at a terminal, still exact JSON if it was. */
export function escapeControlCharacters(text: string): string {
  return text.replace(
    CONTROLS,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
