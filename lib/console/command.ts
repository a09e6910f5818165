/**
 * A console command: its help, options, arguments, and the function that runs it.
 *
 * @module
 */

import type { StoreDescription } from "../store/location.ts";
import type { KeyStore } from "../store/types.ts";
import type { Output } from "./_output.ts";

/** One option of a command, as parsed and as its help shows it. */
export interface OptionSpec {
  /** A string takes a VALUE; a boolean is a switch. */
  type: "string" | "boolean";
  help: string;
}

/** A command of the console; the registry in `commands.ts` lists them all. */
export interface Command {
  /** One line, for `keys --help` and the first line of the command's --help. */
  summary: string;
  /** The command line after `deno task keys`, without `--json`. */
  usage: string;
  /** The options besides `--json` and `--help`, which every command takes. */
  options: Record<string, OptionSpec>;
  /** How many positional arguments it takes, and what to call them in errors. */
  positionals: [min: number, max: number, name?: string];
  /** Lines the command's --help adds after the options. */
  notes?: string[];
  /**
   * The files its arguments name, which the keys task grants it access to
   * (and nothing else on disk besides the store).
   */
  files?(positionals: string[]): { read?: string[]; write?: string[] };
  /**
   * Does the work; throws a ConsoleError to fail. Returns the exit code of
   * an outcome a script must tell apart (`status` with no live server), else
   * nothing: 0.
   */
  run(ctx: Context): Promise<void | number>;
}

/** Everything a command runs with; built once per invocation by admin.ts. */
export interface Context {
  /** The store the server reads too. */
  store: KeyStore;
  /** That store as messages and `--json` name it: never with a password. */
  where: StoreDescription;
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
  /** `--json` was given: stdout carries exactly one JSON value. */
  json: boolean;
  out: Output;
  /** Who runs the command, as the audit log records it. */
  actor: string;
  /** One instant for the whole command, so every "3 days ago" agrees. */
  now: number;
  /** Colour stdout: it is a terminal and NO_COLOR is unset. */
  colour: boolean;
  /** The terminal's width when stdout is one; undefined for pipes and files. */
  columns: number | undefined;
  /** Someone can answer a question: stdin is a terminal. */
  interactive: boolean;
}

export const JSON_OPTION: OptionSpec = {
  type: "boolean",
  help: "print exactly one JSON value on stdout",
};

export const YES_OPTION: OptionSpec = {
  type: "boolean",
  help: "do not ask for confirmation at a terminal",
};

export const KEY_ARGUMENT = "KEY (an id or a name)";

export const FILE_ARGUMENT =
  "FILE (a path such as /var/backups/keys.jsonl, or - for stdout or stdin)";

/** The argument that stands for stdout (export) or stdin (import). */
export const STDIO = "-";

export const CONFIRM_NOTES = [
  "",
  "At a terminal this asks for confirmation first; --yes skips the question.",
  "When stdin is not a terminal (a script, a pipe) it does not ask.",
];
