/**
 * Backup and restore of a store as a file: `keys export` and `keys import`.
 *
 * An export is JSON lines: a header naming the format, one line per key
 * record or audit line as `exportAll()` yields them, and an end line with the
 * counts, so that an import can tell a complete file from one cut short.
 *
 * @module
 */

export { type BackupSummary, counted } from "./_shared.ts";
export { exportTo } from "./export.ts";
export { importFrom } from "./import.ts";
