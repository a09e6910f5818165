/**
 * The command line: which command, its options and arguments, or a request
 * for help. Every mistake is a {@linkcode UsageError} that names the fix.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { looksLikeApiKey } from "../api_key.ts";
import type { Command, Context } from "./command.ts";
import { KeyArgumentError, UsageError } from "./errors.ts";
import { commandHelp, mainHelp } from "./_help.ts";

/** A command line that names a command to run. */
export interface ParsedCommand {
  /** The command's name, as typed. */
  name: string;
  /** The command itself, from the table. */
  command: Command;
  /** Its options, `--json` included. */
  values: Context["values"];
  /** Its positional arguments, within its bounds. */
  positionals: string[];
}

/** Parses `args` against the command table; help is returned as its text. */
export function parse(
  args: string[],
  commands: Readonly<Record<string, Command>>,
): ParsedCommand | { help: string } {
  // Before anything that could quote an argument back (an unknown command,
  // an option node:util does not know, a key that is not found).
  if (args.some(looksLikeApiKey)) throw new KeyArgumentError();
  const [name, ...rest] = args;
  if (
    name === undefined || name === "--help" || name === "-h" || name === "help"
  ) {
    return { help: mainHelp(commands) };
  }
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (command === undefined) {
    throw new UsageError(
      `Unknown command ${JSON.stringify(name)}; the commands are ${
        Object.keys(commands).join(", ")
      } (see --help)`,
    );
  }
  let parsed;
  try {
    parsed = parseArgs({
      args: rest,
      options: {
        ...Object.fromEntries(
          Object.entries(command.options).map((
            [k, v],
          ) => [k, { type: v.type }]),
        ),
        json: { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
      allowPositionals: true,
      strict: true,
    });
  } catch (error) {
    // node:util's messages are long and end in a period; keep the first sentence.
    const message = error instanceof Error ? error.message : String(error);
    throw new UsageError(
      `${message.split(/\.\s|\.$/)[0]}; see "keys ${name} --help"`,
    );
  }
  if (parsed.values.help) return { help: commandHelp(command) };
  const [min, max, what] = command.positionals;
  if (parsed.positionals.length < min) {
    throw new UsageError(`${name} needs ${what}; see "keys ${name} --help"`);
  }
  if (parsed.positionals.length > max) {
    throw new UsageError(
      `${name} takes ${max === 0 ? "no arguments" : `one ${what}`}, not ${
        JSON.stringify(parsed.positionals.slice(max).join(" "))
      }; see "keys ${name} --help"`,
    );
  }
  return {
    name,
    command,
    values: parsed.values,
    positionals: parsed.positionals,
  };
}
