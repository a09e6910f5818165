/**
 * The console's two kinds of failure, and the one place that turns any error
 * into the line an admin reads.
 *
 * @module
 */

import { ConfigError } from "../config.ts";
import { BackupError } from "../backup.ts";
import { describeStoreError } from "./store_errors.ts";
import { StoreInputError } from "../store/errors.ts";

/** A wrong command line: exit code 2. */
export class UsageError extends Error {}

/** A command that could not be done, with a message meant for the admin as is: exit code 1. */
export class CommandError extends Error {}

/**
 * An error as one line for the admin: the message of errors written for
 * them, a fix for a store outside the task's permissions, and anything else
 * marked as the command's failure.
 */
export function failure(error: unknown): string {
  if (
    error instanceof ConfigError || error instanceof CommandError ||
    error instanceof BackupError
  ) {
    return error.message;
  }
  if (error instanceof StoreInputError) return describeStoreError(error);
  if (error instanceof Deno.errors.NotCapable) {
    return `The store is outside what this task may read and write: ${error.message}; run it with deno task keys, which grants what DENO_KV_PATH and FILE name`;
  }
  return `The command failed: ${
    describeStoreError(error) ??
      (error instanceof Error ? error.message : String(error))
  }`;
}
