/**
 * What a command runs with: actor, time and terminal, read once per run, and the
 * store with the revocations keys' lifetimes already decided written down.
 *
 * @module
 */

import { looksLikeApiKey } from "../auth/api_key.ts";
import { processEnv } from "../server/config.ts";
import { ImportStateError } from "../store/errors.ts";
import { retireDue as retireAll } from "../store/expiry.ts";
import { normalizeActor } from "../store/records.ts";
import type { StoreDescription } from "../store/location.ts";
import type { KeyStore } from "../store/types.ts";
import type { Context } from "./command.ts";
import type { Output } from "./_output.ts";
import type { ParsedCommand } from "./_parse.ts";

/** One command run's context: `store` (named `options.where`), writing to `options.out`. */
export function commandContext(
  store: KeyStore,
  parsed: ParsedCommand,
  options: { out: Output; where: StoreDescription },
): Context {
  return {
    store,
    where: options.where,
    values: parsed.values,
    positionals: parsed.positionals,
    json: parsed.values.json === true,
    out: options.out,
    actor: actor(),
    now: Date.now(),
    // NO_COLOR (https://no-color.org), when set and not empty, turns it off.
    colour: Deno.stdout.isTerminal() && !processEnv("NO_COLOR"),
    columns: terminalColumns(),
    interactive: Deno.stdin.isTerminal(),
  };
}

/** The terminal's width; undefined for a pipe or file, whose lines keep full width. */
function terminalColumns(): number | undefined {
  if (!Deno.stdout.isTerminal()) return undefined;
  try {
    // A pseudo-terminal nobody sized reports 0: treat it as unknown.
    return Deno.consoleSize().columns || undefined;
  } catch {
    return undefined;
  }
}

/** The OS user and host, made safe and bounded for the audit log. */
function actor(): string {
  let user = processEnv("USER") ?? processEnv("LOGNAME");
  let host = "unknown";
  try {
    // Containers often set no USER; the uid still says who it was.
    user ??= `uid ${Deno.uid()}`;
    host = Deno.hostname();
  } catch {
    // Without --allow-sys the audit still records what it could.
  }
  user ??= "unknown";
  // The environment is not checked like the arguments: a key pasted into
  // USER would otherwise be stored in the audit log and every backup.
  if (looksLikeApiKey(user)) user = "withheld";
  if (looksLikeApiKey(host)) host = "withheld";
  return normalizeActor(`${user}@${host}`);
}

/**
 * Revokes valid keys past their deadline, freeing names and auditing it as
 * "expiry". Not for safety: the server refuses such keys either way.
 */
export async function retireDue(store: KeyStore): Promise<void> {
  try {
    await retireAll(store, { actor: "expiry" });
  } catch (error) {
    // An unfinished import is the command's to report, with its fix.
    if (!(error instanceof ImportStateError)) throw error;
  }
}
