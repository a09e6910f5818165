/**
 * Prints the permission flags of the server for the configuration in the
 * environment, on one line, for the start task to pass to `deno run`:
 *
 *     deno run … $(deno run … scripts/permissions.ts) main.ts
 *
 * It never fails the start itself: with a bad configuration it prints only
 * the variables, so that main.ts reads them and words the problem, and it
 * leaves out what the task's shell would split (a path with a space), which
 * main.ts then refuses with the exact command that grants it.
 *
 * @module
 */

import {
  ConfigError,
  type EnvReader,
  processEnv,
  readConfig,
} from "../lib/server/config.ts";
import {
  ENV_FILE_GRANT,
  type Grant,
  permissionFlags,
  SERVER_VARIABLES,
  serverGrants,
  variableGrants,
} from "../lib/server/permissions.ts";

/**
 * What the task runner would split (whitespace) or expand as a glob (`*`,
 * `?`) in a substitution's output; `[` stays, as IPv6 hosts need it.
 */
const UNPASSABLE = /[\s*?]/;

/** The start task's permission flags for the configuration `env` describes. */
export function startFlags(env: EnvReader): string[] {
  let grants: Grant[];
  try {
    grants = serverGrants(readConfig(env));
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    // The server words the problem, naming what comes from .env.
    grants = [...variableGrants(SERVER_VARIABLES), ENV_FILE_GRANT];
  }
  return permissionFlags(
    grants.filter((grant) => !UNPASSABLE.test(grant.value)),
  );
}

if (import.meta.main) console.log(startFlags(processEnv).join(" "));
