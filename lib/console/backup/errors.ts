/**
 * Why a backup was refused or failed: codes the console turns into exit codes and lines.
 *
 * @module
 */

/** Why a backup was refused or failed: the code of a {@linkcode BackupError}. */
export type BackupErrorCode =
  /** FILE names no file (import), or a folder that does not exist (export). */
  | "file_not_found"
  /** An export's FILE exists already, and an export never overwrites. */
  | "file_exists"
  /** The file is not a complete, well-formed export. */
  | "file_invalid"
  /** This user or process may not read or write FILE. */
  | "file_refused"
  /** Keys changed during every attempt to export. */
  | "export_changed";

/** A backup refused or failed; its message is meant for the admin as is. */
export class BackupError extends Error {
  override name = "BackupError";
  /** True when the command line named the file wrongly (exit code 2). */
  readonly usage: boolean;
  /** Stable, for scripts and tests: never match on the message. */
  readonly code: BackupErrorCode;

  constructor(
    message: string,
    options: { usage?: boolean; code?: BackupErrorCode } = {},
  ) {
    super(message);
    this.usage = options.usage ?? false;
    this.code = options.code ?? "file_invalid";
  }
}
