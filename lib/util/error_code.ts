/**
 * What a log line names an error by: its `code` when it has one (Deno's
 * `EADDRINUSE`, the store's `store_unavailable`), else its class, never its
 * message, which may carry a value.
 *
 * @module
 */

/** The error's string `code`, else its class name (or type). */
export function errorCode(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === "string") return code;
  return error instanceof Error ? error.name : typeof error;
}
