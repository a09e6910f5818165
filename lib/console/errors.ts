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

/**
 * An argument that looks like an API key: refused without being echoed or
 * looked up, since the command line is in the shell's history and in what
 * the task runner prints. Exit code 2.
 */
export class KeyArgumentError extends UsageError {
  /** Stable, for tests and callers: never match on the message. */
  readonly code = "key_argument";

  constructor() {
    super(
      'That argument looks like an API key, so it is neither shown nor looked up; to find which key a value is, pipe it to "deno task -q keys identify", which reads it from stdin (see keys identify --help)',
    );
  }
}

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
    return `The console was refused a permission its configuration did not name (${error.message}); run it with deno task keys`;
  }
  return `The command failed: ${
    describeStoreError(error) ??
      (error instanceof Error ? error.message : String(error))
  }`;
}
