/**
 * Characters that make a terminal do something instead of showing something,
 * and the one way the console and the check make them visible.
 *
 * The set: every C0 control (U+0000–U+001F, newline and tab included, as
 * every field shown is one line), DEL (U+007F), every C1 control
 * (U+0080–U+009F, such as CSI U+009B and OSC U+009D, which many terminals
 * obey like ESC [ and ESC ]), the line and paragraph separators U+2028 and
 * U+2029, and the bidirectional controls that reorder what is shown (U+061C,
 * U+200E, U+200F, U+202A–U+202E, U+2066–U+2069).
 *
 * The notation is JSON's: `\u001b`, `\u202e`. A person sees which character
 * was there; the result holds no character of the set; and applied to text
 * that `JSON.stringify` produced, it yields JSON that parses to the very
 * same value, since these characters only ever occur inside JSON strings.
 * A backslash is left as it is, so a name that holds the six characters
 * `\u001b` looks like one that held an ESC: harmless, as neither acts.
 *
 * @module
 */

const CONTROL =
  // deno-lint-ignore no-control-regex
  /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;
const CONTROLS = new RegExp(CONTROL.source, "g");

/** Whether text holds a character of the set, to refuse it as input. */
export function hasControlCharacters(text: string): boolean {
  return CONTROL.test(text);
}

/**
 * Text with every character of the set replaced by its `\uXXXX` escape:
 * safe to print at a terminal, and still exact JSON when the text was JSON.
 */
export function escapeControlCharacters(text: string): string {
  return text.replace(
    CONTROLS,
    (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}
