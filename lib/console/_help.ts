/**
 * Help texts generated from the command table, so none can miss a command or option.
 *
 * @module
 */

import { type Command, JSON_OPTION, type OptionSpec } from "./command.ts";

/** `keys --help`: every command of `commands` with its summary, then the common rules. */
export function mainHelp(commands: Readonly<Record<string, Command>>): string {
  const all = Object.values(commands);
  const width = Math.max(...all.map((c) => c.usage.length));
  return [
    "Manage the API keys of the integration service.",
    "",
    "Usage: deno task -q keys <command> [options]",
    "",
    "Commands:",
    ...all.map((c) => `  ${c.usage.padEnd(width)}  ${c.summary}`),
    "",
    "KEY is a key id or the name of a valid key.",
    "FILE may be anywhere: the keys task may read it (import) or write its folder",
    "(export), relative to the project folder; - is stdin or stdout.",
    "Every command takes --json (one JSON value on stdout) and --help;",
    "keys --version prints the release.",
    "At a terminal, revoke and rotate ask first (--yes skips the question) and",
    "listings are coloured; set NO_COLOR to turn colour off. Scripts, whose",
    "stdin and stdout are not terminals, are neither asked nor coloured.",
    // Every variable the keys task may read is named here; a test holds this
    // to the task's --allow-env.
    "The store is PostgreSQL when DATABASE_URL is set (its driver reads PGAPPNAME),",
    "else Deno KV at DENO_KV_PATH (default ./data/keys.db).",
    "The audit log records who acted as USER (or LOGNAME) and the host name.",
  ].join("\n");
}

/** `keys COMMAND --help`: summary, usage, every option, then the command's notes. */
export function commandHelp(command: Command): string {
  const options: Record<string, OptionSpec> = {
    ...command.options,
    json: JSON_OPTION,
  };
  const names = Object.entries(options).map(([option, spec]) =>
    `--${option}${spec.type === "string" ? " VALUE" : ""}`
  );
  // Sized to the longest, with two spaces to spare, so that no option runs
  // into its text (--until-first-use, --expires-in VALUE).
  const width = Math.max("--help".length, ...names.map((n) => n.length)) + 2;
  return [
    `${command.summary[0].toUpperCase()}${command.summary.slice(1)}.`,
    "",
    `Usage: deno task -q keys ${command.usage} [--json]`,
    "",
    "Options:",
    ...Object.values(options).map((spec, i) =>
      `  ${names[i].padEnd(width)}${spec.help}`
    ),
    `  ${"--help".padEnd(width)}show this help`,
    ...(command.notes ?? []),
  ].join("\n");
}
