/**
 * Questions at a terminal before a change that cannot be undone.
 *
 * @module
 */

import { writeAll } from "../util/write_all.ts";
import { ConsoleError } from "./errors.ts";
import { safeLines } from "./_output.ts";

/**
 * A yes/no question on stderr (stdout may be captured) when someone is at the
 * terminal; a script is never asked. Anything but y or yes throws a
 * {@linkcode ConsoleError} `declined`.
 */
export async function confirm(
  text: { question: string; declined: string },
  options: { yes: boolean; interactive: boolean },
): Promise<void> {
  if (options.yes || !options.interactive) return;
  await writeAll(Deno.stderr, `${safeLines(text.question)} [y/N] `);
  const answer = await readAnswer();
  if (answer === null) await writeAll(Deno.stderr, "\n");
  if (!/^\s*y(es)?\s*$/i.test(answer ?? "")) {
    throw new ConsoleError(text.declined, { code: "declined" });
  }
}

/** One line from stdin, without its newline; null at end of input. */
async function readAnswer(): Promise<string | null> {
  const decoder = new TextDecoder();
  const buffer = new Uint8Array(256);
  let text = "";
  while (!text.includes("\n")) {
    const n = await Deno.stdin.read(buffer);
    if (n === null) return text === "" ? null : text;
    text += decoder.decode(buffer.subarray(0, n), { stream: true });
  }
  return text.slice(0, text.indexOf("\n"));
}
