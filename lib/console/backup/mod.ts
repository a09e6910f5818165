/**
 * `keys export` and `keys import`: JSON lines, a header naming the format, one
 * line per record or audit line as `exportAll()` yields them, and an end line
 * with the counts, so an import can tell a complete file from one cut short.
 *
 * @module
 */

export { type BackupSummary, counted } from "./_shared.ts";
export { exportTo } from "./export.ts";
export { importFrom } from "./import.ts";
