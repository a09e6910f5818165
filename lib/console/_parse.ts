/**
 * The command line: command, options, arguments or help. Each mistake is a
 * one-line {@linkcode ConsoleError} naming the fix (unknown, repeated or
 * valueless option, impossible key id). Not node:util's parseArgs, which takes
 * a repeated option's last silently and calls a missing value "ambiguous".
 *
 * @module
 */

import { looksLikeApiKey } from "../auth/api_key.ts";
import { MAX_KEY_ID } from "../store/records.ts";
import { type Command, type Context, KEY_ARGUMENT } from "./command.ts";
import { ConsoleError } from "./errors.ts";
import { commandHelp, mainHelp } from "./_help.ts";
import { visible } from "./_output.ts";
import { versionLine } from "../util/version.ts";

/** A command line that names a command to run: its options include `--json`. */
export interface ParsedCommand {
  name: string;
  command: Command;
  values: Context["values"];
  positionals: string[];
}

/** Parses `args` against the command table; help is returned as its text. */
export function parse(
  args: string[],
  commands: Readonly<Record<string, Command>>,
): ParsedCommand | { help: string } {
  // Before anything that could quote an argument back (an unknown command,
  // an unknown option, a key that is not found): the command line is in the
  // shell's history and in what the task runner prints.
  if (args.some(looksLikeApiKey)) {
    throw new ConsoleError(
      'That argument looks like an API key, so it is neither shown nor looked up; to find which key a value is, pipe it to "deno task -q keys identify", which reads it from stdin (see keys identify --help)',
      { code: "key_argument" },
    );
  }
  const [name, ...rest] = args;
  // `keys help create` is `keys create --help`; `keys help` alone, the list.
  const topics = name === "help" ? rest.filter((a) => !a.startsWith("-")) : [];
  if (topics.length > 1) {
    throw new ConsoleError(
      `keys help takes one command, such as "keys help create"; ${
        quoted(topics[1])
      } is one too many`,
      { code: "argument_extra" },
    );
  }
  if (topics.length === 1) return parse([topics[0], "--help"], commands);
  // Printed as help is, so that it needs no more than --help does.
  if (name === "--version") {
    if (rest.length === 0) return { help: versionLine() };
    throw new ConsoleError("keys --version takes nothing else", {
      code: "argument_extra",
    });
  }
  if (
    name === undefined || name === "--help" || name === "-h" || name === "help"
  ) {
    return { help: mainHelp(commands) };
  }
  const command = Object.hasOwn(commands, name) ? commands[name] : undefined;
  if (command === undefined) {
    throw new ConsoleError(
      `Unknown command ${quoted(name)}; the commands are ${
        Object.keys(commands).join(", ")
      } (see --help)`,
      { code: "unknown_command" },
    );
  }
  const options = optionTypes(command);
  const ending = rest.indexOf("--");
  const flags = ending === -1 ? rest : rest.slice(0, ending);
  // Help wins over any other mistake on the line: it is what was asked for.
  if (flags.includes("--help") || flags.includes("-h")) {
    return { help: commandHelp(command) };
  }
  const values: Context["values"] = {};
  const positionals: string[] = [];
  const see = `see "keys ${name} --help"`;
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    if (arg === "--") {
      positionals.push(...rest.slice(i + 1));
      break;
    }
    if (!arg.startsWith("-") || arg === "-") {
      positionals.push(arg);
      continue;
    }
    const equals = arg.indexOf("=");
    const option = arg.startsWith("--")
      ? arg.slice(2, equals === -1 ? undefined : equals)
      : arg.slice(1);
    const type = Object.hasOwn(options, option) ? options[option] : undefined;
    if (type === undefined || !arg.startsWith("--")) {
      throw new ConsoleError(
        `Unknown option '${
          visible(equals === -1 ? arg : arg.slice(0, equals))
        }' for ${name}; ${see}`,
        { code: "unknown_option" },
      );
    }
    if (type === "boolean") {
      if (equals !== -1) {
        throw new ConsoleError(
          `--${option} takes no value; write --${option} alone`,
          { code: "option_value_unexpected" },
        );
      }
      // Saying a switch twice means what saying it once does.
      values[option] = true;
      continue;
    }
    let value: string;
    if (equals !== -1) value = arg.slice(equals + 1);
    else {
      const next = rest[i + 1];
      if (next === undefined || next === "--" || isOption(next)) {
        throw new ConsoleError(
          `--${option} needs a value${
            next === undefined || next === "--"
              ? ""
              : `, but ${quoted(next)} follows it`
          }; write --${option} VALUE, or --${option}=VALUE for a value that starts with -`,
          { code: "option_value_missing" },
        );
      }
      value = next;
      i++;
    }
    const earlier = values[option];
    if (typeof earlier === "string") {
      throw new ConsoleError(
        `--${option} is given twice (${quoted(earlier)}, then ${
          quoted(value)
        }); give it once`,
        { code: "option_repeated" },
      );
    }
    values[option] = value;
  }
  const [min, max, what] = command.positionals;
  if (positionals.length < min) {
    throw new ConsoleError(`${name} needs ${what}; ${see}`, {
      code: "argument_missing",
    });
  }
  if (positionals.length > max) {
    throw new ConsoleError(
      `${name} takes ${max === 0 ? "no arguments" : `one ${what}`}, not ${
        quoted(positionals.slice(max).join(" "))
      }; ${see}`,
      { code: "argument_extra" },
    );
  }
  if (what === KEY_ARGUMENT && positionals[0] !== undefined) {
    checkKeyId(positionals[0]);
  }
  return { name, command, values, positionals };
}

/**
 * A KEY of digits is an id: an impossible one is refused before the store is
 * asked, quoted as typed (Number() makes twenty digits 100000000000000000000).
 */
function checkKeyId(ref: string): void {
  if (!/^\d+$/.test(ref)) return;
  const id = Number(ref);
  if (id >= 1 && id <= MAX_KEY_ID) return;
  throw new ConsoleError(
    `Key ids are whole numbers from 1 to ${MAX_KEY_ID}, so no key has the id ${ref}; run "keys list --all" to see the keys`,
    { code: "key_id_out_of_range" },
  );
}

/** Every option the command takes, with its type: its own, --json and --help. */
function optionTypes(
  command: Command,
): Record<string, "string" | "boolean"> {
  return {
    ...Object.fromEntries(
      Object.entries(command.options).map(([k, v]) => [k, v.type]),
    ),
    json: "boolean",
    help: "boolean",
  };
}

/** `--name`, `-h`: an option, not a value; a lone `-` is stdin or stdout. */
function isOption(arg: string): boolean {
  return arg.startsWith("-") && arg !== "-" && !/^-\d/.test(arg);
}

/** An argument quoted back, made harmless to the terminal. */
function quoted(text: string): string {
  return visible(JSON.stringify(text));
}
