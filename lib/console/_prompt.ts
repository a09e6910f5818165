/**
 * Questions at a terminal before a change that cannot be undone.
 *
 * @module
 */

import { writeAll } from "../util/write_all.ts";
import { ConsoleError } from "./errors.ts";
import { safeLines } from "./_output.ts";

/** What {@linkcode confirm} asks, and the failure when the answer is no. */
export interface Question {
  /** Asked on stderr, followed by ` [y/N] `. */
  question: string;
  /** The message of the {@linkcode ConsoleError} thrown on any answer but yes. */
  declined: string;
}

/** When not to ask: `--yes` was given, or nobody is at the terminal. */
export interface ConfirmOptions {
  /** The command line had `--yes`. */
  yes: boolean;
  /** stdin is a terminal, so someone can answer. */
  interactive: boolean;
}

/**
 * Asks a yes/no question on stderr (stdout may be captured, as with
 * `NEW=$(keys rotate …)`) when someone is at the terminal; a script is never
 * asked. Anything but y or yes declines.
 */
export async function confirm(
  text: Question,
  options: ConfirmOptions,
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
