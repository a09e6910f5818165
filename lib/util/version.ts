/**
 * The service's release version, read from deno.json's `version`, which
 * is written there once. Imported as a module rather than read as a file:
 * no entrypoint needs a read permission for it, and a compiled binary
 * carries it.
 *
 * @module
 */

import denoJson from "../../deno.json" with { type: "json" };

/** The release, such as `1.0.0` (semantic versioning: docs/versioning.md). */
export const VERSION: string = denoJson.version;

/** What `--version` prints on every entrypoint: `integration-service 1.0.0`. */
export function versionLine(): string {
  return `integration-service ${VERSION}`;
}
