/**
 * The console's failure, its stable code (`--json`'s `error.code`), and the one
 * place that turns any error into the line an admin reads.
 *
 * @module
 */

import { ConfigError } from "../server/config.ts";
import { PermissionsMissingError } from "../server/permissions.ts";
import { describeStoreError } from "./store_errors.ts";
import {
  type StoreInputCode,
  StoreInputError,
  type StoreOpenCode,
  StoreOpenError,
  type StoreUnavailableCode,
  StoreUnavailableError,
} from "../store/errors.ts";
import { WaitInterruptedError } from "../store/acknowledged.ts";

const USAGE_CODES = [
  "unknown_command",
  "unknown_option",
  "option_repeated",
  "option_value_missing",
  "option_value_unexpected",
  "option_required",
  "options_conflict",
  "argument_missing",
  "argument_extra",
  "invalid_value",
  "key_argument",
  "key_id_out_of_range",
  "rate_syntax",
  "rate_too_large",
  "file_not_found",
  "https_required",
] as const;
/** Why a command line is wrong: exit code 2. */
export type UsageCode = typeof USAGE_CODES[number];

const COMMAND_CODES = [
  "command_failed",
  "declined",
  "key_revoked",
  "key_not_delivered",
  "stdout_discards",
  "not_a_key",
  "unknown_key_value",
  "change_uncertain",
  "file_exists",
  "file_invalid",
  "file_refused",
  "export_changed",
  "delivery_not_found",
  "webhook_test_failed",
] as const;
/** Why a command could not be done: exit code 1. */
export type CommandCode = typeof COMMAND_CODES[number];

/**
 * Every `--json` `error.code`, documented in docs/console.md: the console's,
 * the store's (lib/store/errors.ts), and a few for errors from elsewhere.
 */
export type ConsoleErrorCode =
  | UsageCode
  | CommandCode
  | StoreInputCode
  | StoreUnavailableCode
  | StoreOpenCode
  | "config_invalid"
  | "permissions_missing"
  | "permission_refused"
  | "wait_interrupted"
  | "internal";

/** The same codes at run time, for tests and the docs' table. */
export const CONSOLE_ERROR_CODES: readonly ConsoleErrorCode[] = [
  ...USAGE_CODES,
  ...COMMAND_CODES,
  "invalid_name",
  "invalid_email",
  "invalid_reason",
  "invalid_allowFrom",
  "invalid_rateLimit",
  "key_not_found",
  "name_taken",
  "rotate_revoked",
  "rotate_retiring",
  "key_collision",
  "key_ids_exhausted",
  "import_unfinished",
  "import_aborted",
  "import_not_empty",
  "import_raced",
  "import_bad_key",
  "import_bad_audit",
  "import_unknown_item",
  "store_kind_unsupported",
  "endpoint_not_found",
  "endpoints_full",
  "store_unavailable",
  "store_busy",
  "store_overloaded",
  "change_unconfirmed",
  "change_cancelled",
  "schema_too_new",
  "schema_unknown",
  "config_invalid",
  "permissions_missing",
  "permission_refused",
  "wait_interrupted",
  "internal",
];

/**
 * A failure worded for the admin. A usage error (exit 2) when its code is a
 * usage code or `usage` says so (a store rule refused input before asking the
 * store), else a command that could not be done (exit 1).
 */
export class ConsoleError extends Error {
  override name = "ConsoleError";
  /** Stable, for scripts and tests: never match on the message. */
  readonly code: UsageCode | CommandCode | StoreInputCode;
  readonly usage: boolean;

  constructor(
    message: string,
    options: { code?: ConsoleError["code"]; usage?: boolean } = {},
  ) {
    super(message);
    this.code = options.code ?? "command_failed";
    this.usage = options.usage ??
      (USAGE_CODES as readonly string[]).includes(this.code);
  }
}

/**
 * An error as one line: the message of errors written for the admin, a fix
 * for a store outside the task's permissions, else marked the command's failure.
 */
export function failure(error: unknown): string {
  if (
    error instanceof ConfigError || error instanceof ConsoleError ||
    error instanceof PermissionsMissingError || error instanceof StoreOpenError
  ) {
    return error.message;
  }
  // A refusal or an outage is its own sentence, with the fix.
  if (
    error instanceof StoreInputError || error instanceof StoreUnavailableError
  ) return describeStoreError(error);
  if (error instanceof Deno.errors.NotCapable) {
    return `The console was refused a permission its configuration did not name (${error.message}); run it with deno task -q keys`;
  }
  return `The command failed: ${
    error instanceof Error ? error.message : String(error)
  }`;
}

/** The stable code of any error the console reports. */
export function errorCode(error: unknown): ConsoleErrorCode {
  if (
    error instanceof ConsoleError || error instanceof StoreInputError ||
    error instanceof StoreUnavailableError || error instanceof StoreOpenError
  ) {
    return error.code;
  }
  if (error instanceof ConfigError) return "config_invalid";
  if (error instanceof PermissionsMissingError) return "permissions_missing";
  if (error instanceof WaitInterruptedError) return "wait_interrupted";
  if (error instanceof Deno.errors.NotCapable) return "permission_refused";
  return "internal";
}

/** The exit code of a failure: 2 for a wrong command line, 1 for anything else. */
export function exitCodeOf(error: unknown): 1 | 2 {
  return error instanceof ConsoleError && error.usage ? 2 : 1;
}
