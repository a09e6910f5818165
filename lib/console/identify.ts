/**
 * `keys identify`: which key a leaked value is, the value never on the command
 * line, screen or output: read from stdin (hidden at a terminal) or FILE; a
 * key-shaped argument is refused before any command runs (_parse.ts).
 *
 * @module
 */

import {
  hashApiKey,
  isWellFormedApiKey,
  KEY_PATTERN,
} from "../auth/api_key.ts";
import { recordAt } from "../store/expiry.ts";
import { writeAll } from "../util/write_all.ts";
import { type Command, STDIO } from "./command.ts";
import { ConsoleError } from "./errors.ts";
import { named } from "./_records.ts";
import { jsonText, visible } from "./_output.ts";

/** More than any pasted key with its surroundings; the rest is not read. */
const MAX_INPUT_BYTES = 64 * 1024;

export const identify: Command = {
  summary: "tell which key a leaked value is, read from stdin or a FILE",
  usage: "identify [FILE]",
  options: {},
  positionals: [0, 1, "FILE (a path, or - for stdin, the default)"],
  notes: [
    "",
    "Prints the key's id, name, e-mail and status; never the value. Give the",
    "value on stdin, never as an argument (a key-shaped argument is refused,",
    "since the shell keeps it in its history):",
    "  pbpaste | deno task -q keys identify",
    "  deno task -q keys identify ./leaked.txt",
    "At a terminal it asks for the value and does not show what is typed.",
  ],
  files: ([file]) =>
    file === undefined || file === STDIO || file === "" ? {} : { read: [file] },
  async run({ store, positionals, json, out, interactive }) {
    const file = positionals[0] ?? STDIO;
    const text = file === STDIO
      ? await readStdin(interactive)
      : await readFile(file);
    const value = text.trim();
    // The first key-shaped run, should the value come with surroundings
    // (a log line, a header): what is around it is never printed either.
    const candidate = KEY_PATTERN.exec(value)?.[0] ?? value;
    if (!isWellFormedApiKey(candidate)) {
      throw new ConsoleError(
        "The value is not a well-formed API key (isk_, 36 letters and digits, a valid checksum), so no key can be it; check what was copied",
        { code: "not_a_key" },
      );
    }
    const found = await store.findByHash(hashApiKey(candidate));
    if (found === null) {
      throw new ConsoleError(
        "No key in this store has that value: it was not issued by this installation, or was issued before the store was replaced",
        { code: "unknown_key_value" },
      );
    }
    const record = recordAt(found, Date.now());
    const facts = {
      id: record.id,
      name: record.name,
      email: record.email,
      status: record.status,
      revokedAt: record.revokedAt,
      exposedAt: record.exposedAt,
    };
    if (json) {
      out.line(jsonText(facts));
      return;
    }
    out.line(`The value is key ${named(record)}`);
    for (const [field, fact] of Object.entries(facts)) {
      if (fact === null) continue;
      out.line(`${field.padEnd(14)}${visible(String(fact))}`);
    }
    // A key in a rotation's overlap cannot be rotated again: only revoked.
    if (record.status === "valid" && record.replacedBy === null) {
      out.line(
        `It still works: rotate it with "deno task -q keys rotate ${record.id}" or revoke it with "deno task -q keys revoke ${record.id}"`,
      );
    } else if (record.status === "valid") {
      out.line(
        `It still works until ${record.expiresAt}, in a rotation's overlap (key ${record.replacedBy} replaces it): revoke it now with "deno task -q keys revoke ${record.id}"`,
      );
    }
  },
};

async function readFile(file: string): Promise<string> {
  try {
    const bytes = await Deno.readFile(file);
    return new TextDecoder().decode(bytes.subarray(0, MAX_INPUT_BYTES));
  } catch (error) {
    // FILE naming no file is a wrong command line, as for import.
    const missing = error instanceof Deno.errors.NotFound;
    const message = `${visible(file)} cannot be read (${
      error instanceof Error ? error.name : "error"
    }); check the path, or give the value on stdin`;
    throw missing
      ? new ConsoleError(message, { code: "file_not_found" })
      : new ConsoleError(message);
  }
}

/** All of stdin, or at a terminal one line typed without echo. */
async function readStdin(interactive: boolean): Promise<string> {
  const decoder = new TextDecoder();
  const buffer = new Uint8Array(4096);
  let text = "";
  let size = 0;
  if (interactive) {
    await writeAll(
      Deno.stderr,
      "Paste the value and press Enter (it is not shown): ",
    );
    Deno.stdin.setRaw(true);
  }
  try {
    while (size < MAX_INPUT_BYTES) {
      const n = await Deno.stdin.read(buffer);
      if (n === null) break;
      size += n;
      text += decoder.decode(buffer.subarray(0, n), { stream: true });
      // Enter, Ctrl-C or Ctrl-D ends what is typed at a raw terminal.
      // deno-lint-ignore no-control-regex
      if (interactive && /[\r\n\x03\x04]/.test(text)) break;
    }
  } finally {
    if (interactive) {
      Deno.stdin.setRaw(false);
      await writeAll(Deno.stderr, "\n");
    }
  }
  // Ctrl-C at a raw terminal arrives as a character, not a signal.
  if (interactive && text.includes("\x03")) {
    throw new ConsoleError("Interrupted; nothing was looked up");
  }
  // At a terminal, the line typed; otherwise everything piped in.
  // deno-lint-ignore no-control-regex
  return interactive ? text.split(/[\r\n\x04]/)[0] : text;
}
