/**
 * deno.json's `version`, imported rather than read: no entrypoint needs a
 * read permission for it, and a compiled binary carries it.
 *
 * @module
 */

import denoJson from "../../deno.json" with { type: "json" };

/** Semantic versioning: docs/versioning.md. */
export const VERSION: string = denoJson.version;

/** What `--version` prints on every entrypoint: `integration-service 1.2.0`. */
export function versionLine(): string {
  return `integration-service ${VERSION}`;
}
