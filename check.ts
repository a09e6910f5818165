/**
 * The integrator's connection check: calls `GET /api/v1/integration/connection`
 * with the key in `X-API-Key` and reports, as a monitoring plugin does, whether
 * the service is reachable, which key answered and how far this machine's clock
 * is from the server's.
 *
 *     export INTEGRATION_BASE_URL=https://integration.example.net
 *     export INTEGRATION_API_KEY=…   # from your secrets store
 *     deno task check [--json]   # or --help, --version
 *
 * Permissions (the `check` task in deno.json): `--allow-net` for any host,
 * because the base URL is the integrator's own installation and cannot be known
 * when the task is written; `--allow-env` only for the variables read here. No
 * file access: the key comes from the environment only.
 *
 * Exit codes follow the monitoring-plugin convention: 0 OK, 1 WARNING (clock
 * offset above the threshold), 2 CRITICAL (refused key, rate limit, outage,
 * unreachable, TLS failure, timeout, any other status), 3 UNKNOWN (missing or
 * bad configuration, an answer that is not the connection status).
 *
 * The check itself is in `lib/check/`: configuration, the HTTP call, judging
 * the answer, and formatting.
 *
 * @module
 */

import { KEY_PATTERN } from "./lib/auth/api_key.ts";
import { runCheck, type RunCheckOptions } from "./lib/check/call.ts";
import {
  CheckConfigError,
  type EnvReader,
  readCheckConfig,
  readKeyQuietly,
  strictProcessEnv,
} from "./lib/check/config.ts";
import { formatOutcome, withholdKey } from "./lib/check/format.ts";
import { CHECK_HELP } from "./lib/check/help.ts";
import { blankOutcome, type CheckOutcome, EXIT } from "./lib/check/outcome.ts";
import { versionLine } from "./lib/util/version.ts";

/** Options of {@linkcode main}. */
export interface MainOptions extends RunCheckOptions {
  /** Reads the environment; the process environment by default. */
  env?: EnvReader;
  /** Receives the whole output; stdout by default. */
  write?: (text: string) => void;
}

/** Runs the command line; returns the exit code. */
export async function main(
  args: string[],
  options: MainOptions = {},
): Promise<number> {
  const env = options.env ?? strictProcessEnv;
  const write = options.write ?? ((text) => console.log(text));

  if (args.includes("--help") || args.includes("-h")) {
    // Fixed text: nothing of the environment or of a server is in it.
    write(CHECK_HELP.trimEnd());
    return EXIT.OK;
  }
  if (args.includes("--version")) {
    write(versionLine());
    return EXIT.OK;
  }
  const json = args.includes("--json");
  let outcome: CheckOutcome;
  const stray = args.findIndex((arg) => arg !== "--json");
  if (stray !== -1) {
    // Never echo the argument: it may be the key or a URL carrying it.
    outcome = {
      ...blankOutcome(null),
      summary: `unexpected argument #${
        stray + 1
      }; the check takes only --json, --help and --version, and reads the address and key from environment variables (see --help)`,
      advice: KEY_PATTERN.test(args[stray])
        ? "an API key was passed as an argument: it may now be in shell history and process lists, so remove it from there and have the key replaced"
        : null,
    };
  } else {
    try {
      outcome = await runCheck(readCheckConfig(env), options);
    } catch (error) {
      if (!(error instanceof CheckConfigError)) throw error;
      outcome = { ...blankOutcome(null), summary: error.message };
    }
  }
  // The one guard against printing the key, even text a server sent back:
  // everything printed past --help is a field of the outcome, and
  // withholdKey scrubs every one of them, in any spelling. Formatting only
  // adds labels and numbers around the fields, and a key (no spaces, no
  // colons) cannot span two of them. A second pass over the formatted text
  // for the exact key could catch nothing this has not, so there is none:
  // new output must be a field of the outcome, or pass through withholdKey.
  write(formatOutcome(withholdKey(outcome, readKeyQuietly(env)), { json }));
  return outcome.exitCode;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
