/**
 * `deno task check --help`.
 *
 * @module
 */

import {
  CHECK_ENV,
  DEFAULT_EXPIRY_WARNING_DAYS,
  DEFAULT_MAX_OFFSET_SECONDS,
  DEFAULT_TIMEOUT_SECONDS,
  MAX_TIMEOUT_SECONDS,
} from "./config.ts";
import { CONNECTION_PATH } from "../routes/connection.ts";

/** The help text, ending in a newline. */
export const CHECK_HELP = `Usage: deno task check [--json]

Checks the integration service the way an integrator's monitoring would: calls
GET ${CONNECTION_PATH} with your API key and reports whether the service is
reachable, which key and e-mail answered, and the offset between the server's
clock and this machine's (corrected by half the round trip).

Configuration comes from environment variables only, never from arguments:
arguments end up in shell history and in process lists that other users of
the machine can read, and the key is a credential.

  ${CHECK_ENV.baseUrl}      the installation's address, such as
                            https://integration.example.net (without /api/v1)
  ${CHECK_ENV.apiKey}       your key, from your secrets store
  ${CHECK_ENV.maxOffset}  warn above this clock offset (default ${DEFAULT_MAX_OFFSET_SECONDS})
  ${CHECK_ENV.timeout}     give up after this long (default ${DEFAULT_TIMEOUT_SECONDS}, at most ${MAX_TIMEOUT_SECONDS})
  ${CHECK_ENV.allowPlainHttp}    set to 1 to allow http:// to another machine,
                            which sends the key unencrypted
  ${CHECK_ENV.expiryWarningDays} warn when the key expires within this many
                            days (default ${DEFAULT_EXPIRY_WARNING_DAYS}; 0: never)

A service whose certificate comes from a private CA (one of your own, not a
public one): set DENO_CERT to the CA's certificate file (PEM), such as
DENO_CERT=/etc/integration/ca.pem. Deno reads it itself when it starts, so
the task needs no file permission for it. Without it such a certificate is a
TLS failure (UnknownIssuer). DENO_TLS_CA_STORE=system trusts the machine's
own certificate store instead.

Options:
  --json     print one JSON object instead of the monitoring-plugin text
  --help     print this help
  --version  print the release and exit

Exit codes: 0 OK, 1 WARNING (clock offset above the threshold, the key
expires soon, or its rate limit is used up or has under a tenth left),
2 CRITICAL (key refused, locked out, service unavailable, unreachable, TLS
failure, timeout, other status), 3 UNKNOWN (configuration problem,
unexpected answer).
The key is never printed.
`;
