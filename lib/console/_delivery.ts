/**
 * Handing a new key over: it exists once, on stdout, so a failed write must show.
 *
 * @module
 */

import { fstatSync } from "node:fs";
import { WaitInterruptedError } from "../store/acknowledged.ts";
import { ConsoleError } from "./errors.ts";

/** What `create` and `rotate` say on stderr once the key is out. */
export const STORE_WARNING: string = [
  "This key is shown once and cannot be recovered: only its hash is stored.",
  "Give it to the integrator now, to keep in a secrets manager, an environment variable or an encrypted configuration file;",
  "never in source control, a URL or a log line. If it is lost, rotate it.",
].join("\n");

/** The device numbers of /dev/null: makedev(1, 3) on Linux, (3, 2) on macOS. */
const NULL_DEVICES = new Set([259, 0x3000002]);

/**
 * Refuses to print a key into nothing: a closed stdout is reopened on /dev/null,
 * where writes "succeed", so `keys rotate … >&-` would revoke the old key and
 * hand the new one to nobody.
 */
export function refuseDiscardingStdout(): void {
  let discards = false;
  try {
    const stat = fstatSync(1);
    discards = stat.isCharacterDevice() && NULL_DEVICES.has(stat.rdev);
  } catch {
    // Cannot tell: the write itself will report what goes wrong.
  }
  if (discards) {
    throw new ConsoleError(
      "stdout is closed or /dev/null, where the key would be lost; nothing changed; send stdout to a terminal, a file or a pipe",
      { code: "stdout_discards" },
    );
  }
}

/** Why stdout did not take a write, for a message. */
export function writeFailure(error: unknown): string {
  if (error instanceof Deno.errors.BrokenPipe) {
    return "the program reading it has exited";
  }
  return error instanceof Error ? error.message : String(error);
}

/**
 * A change's result, and its wait's Ctrl-C: the change is made either way, and
 * the key goes out before the interruption, or its reader would discard it.
 */
export async function made<T>(
  change: Promise<T>,
): Promise<[T, WaitInterruptedError | null]> {
  try {
    return [await change, null];
  } catch (error) {
    if (!(error instanceof WaitInterruptedError)) throw error;
    return [error.result as T, error];
  }
}
