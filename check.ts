/**
 * The integrator's connection check: calls `GET /api/v1/integration/connection`
 * with the key in `X-API-Key` and reports, as a monitoring plugin does, whether
 * the service is reachable, which key answered and how far this machine's clock
 * is from the server's.
 *
 *     export INTEGRATION_BASE_URL=https://integration.example.net
 *     export INTEGRATION_API_KEY=…   # from your secrets store
 *     deno task check [--json]
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
 * @module
 */

import { isWellFormedApiKey, KEY_LENGTH, KEY_PATTERN } from "./lib/api_key.ts";
import { decodeAsciiEscapes } from "./lib/_ascii_escapes.ts";
import { escapeControlCharacters } from "./lib/_control_characters.ts";

/** The route this check calls, below the base URL. */
export const CONNECTION_ROUTE = "/api/v1/integration/connection";

/** The environment variables the check reads; the `check` task allows exactly these. */
export const CHECK_ENV = {
  baseUrl: "INTEGRATION_BASE_URL",
  apiKey: "INTEGRATION_API_KEY",
  maxOffset: "CHECK_MAX_OFFSET_SECONDS",
  timeout: "CHECK_TIMEOUT_SECONDS",
  allowPlainHttp: "CHECK_ALLOW_PLAIN_HTTP",
} as const;

/** The monitoring-plugin states, by exit code. */
export const EXIT = { OK: 0, WARNING: 1, CRITICAL: 2, UNKNOWN: 3 } as const;

/** A monitoring-plugin state. */
export type CheckState = keyof typeof EXIT;

/** Reads one environment variable; undefined when unset. */
export type EnvReader = (name: string) => string | undefined;

/** The check's configuration, parsed and validated. */
export interface CheckConfig {
  /** The full URL of the connection route; never carries the key. */
  url: URL;
  /** The key, sent in the header only. */
  apiKey: string;
  /** A clock offset above this many seconds, either way, is a WARNING. */
  maxOffsetSeconds: number;
  /** The whole exchange must finish within this many seconds. */
  timeoutSeconds: number;
}

/** A configuration problem; its message names the variable and the fix, never its value. */
export class CheckConfigError extends Error {
  /** Always `CheckConfigError`. */
  override name = "CheckConfigError";
}

/** What one check found; also the `--json` output. */
export interface CheckOutcome {
  /** The monitoring-plugin state. */
  state: CheckState;
  /** The exit code of that state: 0 to 3. */
  exitCode: number;
  /** The text after `CONNECTION STATE - ` on the first line. */
  summary: string;
  /** False when no HTTP answer came back; null when nothing was attempted. */
  reachable: boolean | null;
  /** The route that was called; null when the configuration stopped the check. */
  url: string | null;
  /** The answer's status; null when none came back. */
  httpStatus: number | null;
  /** The id of the key that answered, from a 200. */
  apiKeyId: number | null;
  /** The e-mail of the integrator the key belongs to, from a 200. */
  email: string | null;
  /** The server's clock as it answered, from a 200. */
  serverUtc: string | null;
  /** serverUtc minus this machine's clock at the midpoint of the request. */
  clockOffsetSeconds: number | null;
  /** From sending the request to receiving the answer's headers. */
  roundTripSeconds: number | null;
  /** The WARNING threshold in use. */
  maxOffsetSeconds: number | null;
  /** From a 429 or 503 answer. */
  retryAfterSeconds: number | null;
  /** What to do about it, for a person reading the alert. */
  advice: string | null;
}

const DEFAULT_MAX_OFFSET_SECONDS = 30;
const DEFAULT_TIMEOUT_SECONDS = 10;
const MAX_TIMEOUT_SECONDS = 300;
// The connection status is a few hundred bytes; a page this big is not it.
const MAX_BODY_BYTES = 64 * 1024;
const HELP = `Usage: deno task check [--json]

Checks the integration service the way an integrator's monitoring would: calls
GET ${CONNECTION_ROUTE} with your API key and reports whether the service is
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

Options:
  --json   print one JSON object instead of the monitoring-plugin text
  --help   print this help

Exit codes: 0 OK, 1 WARNING (clock offset above the threshold), 2 CRITICAL
(key refused, rate limited, service unavailable, unreachable, TLS failure,
timeout, other status), 3 UNKNOWN (configuration problem, unexpected answer).
The key is never printed.
`;

/** Parses the configuration; throws {@linkcode CheckConfigError} naming the variable to fix. */
export function readCheckConfig(env: EnvReader): CheckConfig {
  const apiKey = (env(CHECK_ENV.apiKey) ?? "").trim();
  if (apiKey === "") {
    throw new CheckConfigError(
      `${CHECK_ENV.apiKey} is not set; export it from your secrets store (see --help)`,
    );
  }
  if (!isWellFormedApiKey(apiKey)) {
    // The length helps spot a truncated or padded copy without showing the key.
    throw new CheckConfigError(
      `${CHECK_ENV.apiKey} is not a well-formed key (${apiKey.length} characters; a key is isk_ and 36 letters or digits, ${KEY_LENGTH} in all); copy it again exactly as it was shown at generation`,
    );
  }
  return {
    url: readBaseUrl(env),
    apiKey,
    maxOffsetSeconds: readSeconds(env, CHECK_ENV.maxOffset, {
      default: DEFAULT_MAX_OFFSET_SECONDS,
      max: Number.MAX_SAFE_INTEGER,
    }),
    timeoutSeconds: readSeconds(env, CHECK_ENV.timeout, {
      default: DEFAULT_TIMEOUT_SECONDS,
      max: MAX_TIMEOUT_SECONDS,
    }),
  };
}

function readBaseUrl(env: EnvReader): URL {
  const name = CHECK_ENV.baseUrl;
  const raw = (env(name) ?? "").trim();
  if (raw === "") {
    throw new CheckConfigError(
      `${name} is not set; export the installation's address, such as https://integration.example.net`,
    );
  }
  // Checked before parsing so that no later message can echo such a value.
  if (KEY_PATTERN.test(raw)) {
    throw new CheckConfigError(
      `${name} contains an API key; a key never goes in a URL, put it in ${CHECK_ENV.apiKey} and have the exposed key replaced`,
    );
  }
  if (!URL.canParse(raw)) {
    throw new CheckConfigError(
      `${name} is not a URL; set it to the installation's address, such as https://integration.example.net`,
    );
  }
  const url = new URL(raw);
  if (url.protocol !== "https:" && url.protocol !== "http:") {
    throw new CheckConfigError(`${name} must start with https:// or http://`);
  }
  if (url.username !== "" || url.password !== "") {
    throw new CheckConfigError(
      `${name} must not carry a user name or password; remove them, the key in ${CHECK_ENV.apiKey} is the credential`,
    );
  }
  if (url.search !== "" || url.hash !== "") {
    throw new CheckConfigError(
      `${name} must not have a query string or fragment; keep only scheme, host, port and any path prefix`,
    );
  }
  const prefix = url.pathname.replace(/\/+$/, "");
  if (/\/api\/v1(\/|$)/.test(prefix)) {
    throw new CheckConfigError(
      `${name} must stop before /api/v1; the check adds ${CONNECTION_ROUTE} itself`,
    );
  }
  if (
    url.protocol === "http:" && !isLoopback(url.hostname) &&
    !readFlag(env, CHECK_ENV.allowPlainHttp)
  ) {
    throw new CheckConfigError(
      `${name} uses http:// to another machine, which would send the key unencrypted; use https://, or set ${CHECK_ENV.allowPlainHttp}=1 on a network you trust`,
    );
  }
  return new URL(prefix + CONNECTION_ROUTE, url.origin);
}

function readSeconds(
  env: EnvReader,
  name: string,
  rule: { default: number; max: number },
): number {
  const raw = (env(name) ?? "").trim();
  if (raw === "") return rule.default;
  const value = /^\d+(\.\d+)?$/.test(raw) ? Number(raw) : NaN;
  if (!(value > 0 && value <= rule.max)) {
    throw new CheckConfigError(
      `${name} must be a number of seconds above 0${
        rule.max < Number.MAX_SAFE_INTEGER ? ` and at most ${rule.max}` : ""
      }, such as ${rule.default}`,
    );
  }
  return value;
}

function readFlag(env: EnvReader, name: string): boolean {
  const raw = (env(name) ?? "").trim().toLowerCase();
  if (raw === "" || raw === "0" || raw === "false" || raw === "no") {
    return false;
  }
  if (raw === "1" || raw === "true" || raw === "yes") return true;
  throw new CheckConfigError(`${name} must be 1 or 0`);
}

function isLoopback(hostname: string): boolean {
  return hostname === "localhost" || hostname === "[::1]" ||
    /^127\.\d+\.\d+\.\d+$/.test(hostname);
}

/** Options of {@linkcode runCheck}. */
export interface RunCheckOptions {
  /** Replaces the global fetch; tests use it. */
  fetch?: typeof fetch;
  /** This machine's clock in milliseconds since the epoch; tests pin it. */
  now?: () => number;
}

/** Calls the route once and judges the answer. Never throws for network trouble. */
export async function runCheck(
  config: CheckConfig,
  options: RunCheckOptions = {},
): Promise<CheckOutcome> {
  const doFetch = options.fetch ?? fetch;
  const now = options.now ?? Date.now;
  const base = blankOutcome(config);
  const signal = AbortSignal.timeout(config.timeoutSeconds * 1000);
  const sentAt = now();
  const started = performance.now();
  let response: Response;
  let body: string;
  let roundTripMs: number;
  try {
    response = await doFetch(config.url, {
      headers: {
        "X-API-Key": config.apiKey,
        "Accept": "application/json",
        "User-Agent": "integration-connection-check",
      },
      // A followed redirect would hand the X-API-Key header to wherever the
      // Location points, another host included: stop and report instead.
      redirect: "manual",
      signal,
    });
    // The server stamps serverUtc just before its headers leave; the body
    // adds transfer time that is not part of the round trip.
    roundTripMs = performance.now() - started;
    body = await readLimited(response, MAX_BODY_BYTES);
  } catch (error) {
    return { ...base, ...networkFailure(error, config) };
  }
  const answered: CheckOutcome = {
    ...base,
    reachable: true,
    httpStatus: response.status,
    roundTripSeconds: roundTripMs / 1000,
  };
  if (response.status === 200) {
    return judgeStatus(answered, body, {
      localMidpointMs: sentAt + roundTripMs / 2,
      maxOffsetSeconds: config.maxOffsetSeconds,
    });
  }
  return { ...answered, ...judgeFailure(response, body) };
}

function blankOutcome(config: CheckConfig | null): CheckOutcome {
  return {
    state: "UNKNOWN",
    exitCode: EXIT.UNKNOWN,
    summary: "",
    reachable: null,
    url: config === null ? null : config.url.href,
    httpStatus: null,
    apiKeyId: null,
    email: null,
    serverUtc: null,
    clockOffsetSeconds: null,
    roundTripSeconds: null,
    maxOffsetSeconds: config?.maxOffsetSeconds ?? null,
    retryAfterSeconds: null,
    advice: null,
  };
}

function state(name: CheckState): Pick<CheckOutcome, "state" | "exitCode"> {
  return { state: name, exitCode: EXIT[name] };
}

async function readLimited(response: Response, limit: number): Promise<string> {
  if (response.body === null) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body) {
    chunks.push(chunk);
    size += chunk.length;
    if (size > limit) break;
  }
  const all = new Uint8Array(Math.min(size, limit));
  let offset = 0;
  for (const chunk of chunks) {
    const part = chunk.subarray(0, all.length - offset);
    all.set(part, offset);
    offset += part.length;
  }
  return new TextDecoder().decode(all);
}

function networkFailure(
  error: unknown,
  config: CheckConfig,
): Partial<CheckOutcome> {
  const where = config.url.host;
  if (error instanceof DOMException && error.name === "TimeoutError") {
    return {
      ...state("CRITICAL"),
      reachable: false,
      summary: `no answer from ${where} within ${config.timeoutSeconds} s`,
      advice:
        `check that the service is up and that nothing between here and ${where} drops the connection; raise ${CHECK_ENV.timeout} if the link is slow`,
    };
  }
  if (error instanceof Deno.errors.NotCapable) {
    return {
      ...state("UNKNOWN"),
      summary: `network access was refused by Deno: ${error.message}`,
      advice: "run the check with deno task check, which grants --allow-net",
    };
  }
  const detail = causeText(error);
  if (
    /certificate|tls|ssl|handshake|corrupt message|unknownissuer/i.test(detail)
  ) {
    return {
      ...state("CRITICAL"),
      reachable: false,
      summary: `TLS failure with ${where}: ${detail}`,
      advice:
        "check the server's certificate (issuer, expiry, host name) and that the address uses https:// only where the service speaks TLS",
    };
  }
  if (/dns error|failed to lookup|name or service not known/i.test(detail)) {
    return {
      ...state("CRITICAL"),
      reachable: false,
      summary: `cannot resolve ${config.url.hostname}`,
      advice:
        `check the host name in ${CHECK_ENV.baseUrl} and this machine's DNS`,
    };
  }
  if (/connection refused/i.test(detail)) {
    return {
      ...state("CRITICAL"),
      reachable: false,
      summary: `connection refused by ${where}`,
      advice:
        `check that the service is running and the port in ${CHECK_ENV.baseUrl}`,
    };
  }
  return {
    ...state("CRITICAL"),
    reachable: false,
    summary: `cannot reach ${where}: ${detail}`,
    advice: `check ${CHECK_ENV.baseUrl} and the network path to the service`,
  };
}

/** The innermost useful message of a fetch error, without the URL Deno prefixes. */
function causeText(error: unknown): string {
  let text = error instanceof Error ? error.message : String(error);
  if (error instanceof Error && error.cause instanceof Error) {
    text = error.cause.message;
  }
  return clean(
    text.replace(/^error sending request for url \([^)]*\):\s*/i, ""),
    200,
  );
}

function judgeStatus(
  answered: CheckOutcome,
  body: string,
  clock: { localMidpointMs: number; maxOffsetSeconds: number },
): CheckOutcome {
  const status = parseConnectionStatus(body);
  if (typeof status === "string") {
    return {
      ...answered,
      ...state("UNKNOWN"),
      summary: `HTTP 200 with an unexpected body: ${status}`,
      advice:
        `check that ${CHECK_ENV.baseUrl} points at the integration service and not at a proxy or login page`,
    };
  }
  const offset = (Date.parse(status.serverUtc) - clock.localMidpointMs) / 1000;
  const who = `key ${status.apiKeyId} (${status.email})`;
  const found = {
    ...answered,
    apiKeyId: status.apiKeyId,
    email: status.email,
    serverUtc: status.serverUtc,
    clockOffsetSeconds: offset,
  };
  const rtt = `round trip ${milliseconds(answered.roundTripSeconds!)}`;
  if (Math.abs(offset) > clock.maxOffsetSeconds) {
    return {
      ...found,
      ...state("WARNING"),
      summary: `clock offset ${signed(offset)} s exceeds ${
        plain(clock.maxOffsetSeconds)
      } s, ${who}, ${rtt}`,
      advice:
        "synchronise this machine's clock (NTP); if it is right, tell the installation's administrator that the server's clock is off",
    };
  }
  return {
    ...found,
    ...state("OK"),
    summary: `${who}, clock offset ${signed(offset)} s, ${rtt}`,
  };
}

/** The fields of a connection status that the check reports. */
export interface ConnectionStatus {
  /** The key that answered. */
  apiKeyId: number;
  /** The integrator's e-mail. */
  email: string;
  /** The server's clock, ISO 8601 UTC. */
  serverUtc: string;
}

/**
 * The fields the check relies on, or why the body is not a connection status.
 * Fields added in later versions are ignored, so the check keeps working.
 */
export function parseConnectionStatus(body: string): ConnectionStatus | string {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return body.trim() === "" ? "it is empty" : "it is not JSON";
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return "it is not a JSON object";
  }
  const fields = value as Record<string, unknown>;
  if (fields.connected !== true) return "connected is not true";
  if (fields.authenticatedByApiKey !== true) {
    return "authenticatedByApiKey is not true";
  }
  const { apiKeyId, email, serverUtc } = fields;
  if (
    typeof apiKeyId !== "number" || !Number.isSafeInteger(apiKeyId) ||
    apiKeyId < 1
  ) {
    return "apiKeyId is not a whole number of at least 1";
  }
  if (
    typeof email !== "string" || email.length > 254 ||
    // deno-lint-ignore no-control-regex
    !/^[^\s@\u0000-\u001f\u007f]+@[^\s@\u0000-\u001f\u007f]+$/.test(email)
  ) {
    return "email is not an e-mail address";
  }
  if (
    typeof serverUtc !== "string" ||
    !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/.test(serverUtc) ||
    !Number.isFinite(Date.parse(serverUtc))
  ) {
    return "serverUtc is not an ISO 8601 UTC time ending in Z";
  }
  return { apiKeyId, email, serverUtc };
}

function judgeFailure(response: Response, body: string): Partial<CheckOutcome> {
  const status = response.status;
  const code = errorCode(body);
  const label = `HTTP ${status}${code === null ? "" : ` ${code}`}`;
  const retryAfter = retryAfterSeconds(response.headers.get("retry-after"));
  const wait = retryAfter === null ? "later" : `after ${retryAfter} s`;
  if (status === 401) {
    return {
      ...state("CRITICAL"),
      summary: `key refused (${label}): it is revoked or invalid`,
      advice:
        `do not retry in a loop, that leads to lock-out; check that ${CHECK_ENV.apiKey} holds the whole key, otherwise ask the installation's administrator to revoke it and generate a replacement`,
    };
  }
  if (status === 429) {
    return {
      ...state("CRITICAL"),
      retryAfterSeconds: retryAfter,
      summary: `rate limited (${label}), retry ${wait}`,
      advice:
        "wait for Retry-After before the next call; if 401 answers came first, fix or replace the key, or the lock-out starts again",
    };
  }
  if (status === 503) {
    return {
      ...state("CRITICAL"),
      retryAfterSeconds: retryAfter,
      summary: `service unavailable (${label}), retry ${wait}`,
      advice:
        "the service cannot check keys right now; your key is not in question, keep it and retry later",
    };
  }
  if (status >= 300 && status < 400) {
    const location = response.headers.get("location");
    const target = location !== null && URL.canParse(location, response.url)
      ? safeUrl(new URL(location, response.url))
      : "an unknown address";
    return {
      ...state("CRITICAL"),
      summary: `redirected (${label}) to ${target}; not followed`,
      advice:
        `set ${CHECK_ENV.baseUrl} to the final address; redirects are not followed so that the key is never sent to another address`,
    };
  }
  if (status === 400 && code === "key_in_url") {
    return {
      ...state("CRITICAL"),
      summary: `the service saw a credential in the URL (${label})`,
      advice:
        `remove it from ${CHECK_ENV.baseUrl}, and have a key that was in a URL replaced`,
    };
  }
  if (status === 404) {
    return {
      ...state("CRITICAL"),
      summary: `no connection route at this address (${label})`,
      advice:
        `check ${CHECK_ENV.baseUrl}: scheme, host, port and any path prefix, without /api/v1`,
    };
  }
  return {
    ...state("CRITICAL"),
    summary: `unexpected ${label}`,
    advice:
      "look at the service's logs, or ask the installation's administrator",
  };
}

/** The machine-readable `error` of an error body, when it looks like one. */
function errorCode(body: string): string | null {
  try {
    const value = JSON.parse(body);
    const code = value?.error;
    return typeof code === "string" && /^[a-z][a-z0-9_]{0,63}$/.test(code)
      ? code
      : null;
  } catch {
    return null;
  }
}

function retryAfterSeconds(header: string | null): number | null {
  if (header === null) return null;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const date = Date.parse(text);
  return Number.isFinite(date)
    ? Math.max(0, Math.ceil((date - Date.now()) / 1000))
    : null;
}

/**
 * The first line: the state, the summary and, where measured, performance
 * data. Text the server sent (an e-mail, an error) is part of the summary,
 * so control and bidirectional characters are shown as `\uXXXX` escapes.
 */
export function formatFirstLine(outcome: CheckOutcome): string {
  const perf: string[] = [];
  if (
    outcome.clockOffsetSeconds !== null && outcome.maxOffsetSeconds !== null
  ) {
    // A range: alert below -N or above N, since the offset has a sign.
    const max = plain(outcome.maxOffsetSeconds);
    perf.push(
      `offset=${outcome.clockOffsetSeconds.toFixed(6)}s;-${max}:${max}`,
    );
  }
  if (outcome.roundTripSeconds !== null) {
    perf.push(`rtt=${outcome.roundTripSeconds.toFixed(6)}s;;;0`);
  }
  return escapeControlCharacters(
    `CONNECTION ${outcome.state} - ${outcome.summary}` +
      (perf.length === 0 ? "" : ` | ${perf.join(" ")}`),
  );
}

/** The lines after the first: every measurement, then the advice, escaped as the first. */
export function formatDetails(outcome: CheckOutcome): string[] {
  const lines: string[] = [];
  const add = (label: string, value: string) =>
    lines.push(`${(label + ":").padEnd(14)}${value}`);
  if (outcome.reachable !== null) {
    add(
      "reachable",
      outcome.reachable ? `yes, ${outcome.url}` : `no, ${outcome.url}`,
    );
  }
  if (outcome.httpStatus !== null) {
    add("HTTP status", String(outcome.httpStatus));
  }
  if (outcome.apiKeyId !== null) add("key id", String(outcome.apiKeyId));
  if (outcome.email !== null) add("e-mail", outcome.email);
  if (outcome.serverUtc !== null) add("server UTC", outcome.serverUtc);
  if (outcome.clockOffsetSeconds !== null) {
    const offset = outcome.clockOffsetSeconds;
    const direction = offset >= 0 ? "ahead of" : "behind";
    add(
      "clock offset",
      `${signed(offset)} s ± ${
        (outcome.roundTripSeconds! / 2).toFixed(3)
      } s (the server's clock is ${direction} this machine's; warning above ${
        plain(outcome.maxOffsetSeconds!)
      } s)`,
    );
  }
  if (outcome.roundTripSeconds !== null) {
    add("round trip", milliseconds(outcome.roundTripSeconds));
  }
  if (outcome.retryAfterSeconds !== null) {
    add("retry after", `${outcome.retryAfterSeconds} s`);
  }
  if (outcome.advice !== null) add("what to do", outcome.advice);
  return lines.map(escapeControlCharacters);
}

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
  const env = options.env ?? processEnv;
  const write = options.write ?? ((text) => console.log(text));
  // Whatever goes out is scrubbed of the key, even text a server sent back.
  const secret = readQuietly(env, CHECK_ENV.apiKey).trim();
  const emit = (text: string) =>
    write(secret.length >= 8 ? text.replaceAll(secret, "[redacted]") : text);

  if (args.includes("--help") || args.includes("-h")) {
    emit(HELP.trimEnd());
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
      }; the check takes only --json and --help, and reads the address and key from environment variables (see --help)`,
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
  if (secret.length >= 8) outcome = withholdKey(outcome, secret);
  emit(
    json
      // Still exact JSON: the escapes are JSON's own.
      ? escapeControlCharacters(JSON.stringify(outcome))
      : [formatFirstLine(outcome), ...formatDetails(outcome)].join("\n"),
  );
  return outcome.exitCode;
}

/**
 * Every string of the outcome that holds the key in any spelling a server
 * could send it back in (percent-encoded, split by invisible or control
 * characters) is withheld whole: a reflecting server already has the key,
 * but monitoring output and alert history must not.
 */
function withholdKey<T>(value: T, secret: string): T {
  const wanted = letters(secret);
  const visit = (item: unknown): unknown => {
    if (typeof item === "string") {
      const redacted = item.replaceAll(secret, "[redacted]");
      return letters(redacted).includes(wanted)
        ? "[withheld: the text held the API key]"
        : redacted;
    }
    if (Array.isArray(item)) return item.map(visit);
    if (item !== null && typeof item === "object") {
      return Object.fromEntries(
        Object.entries(item).map(([k, v]) => [k, visit(v)]),
      );
    }
    return item;
  };
  return visit(value) as T;
}

/** The letters and digits of a text, after decoding any ASCII `%XX`. */
function letters(text: string): string {
  return decodeAsciiEscapes(text).replace(/[^0-9A-Za-z]/g, "");
}

function readQuietly(env: EnvReader, name: string): string {
  try {
    return env(name) ?? "";
  } catch {
    // readCheckConfig reports the same variable with its fix.
    return "";
  }
}

function processEnv(name: string): string | undefined {
  try {
    return Deno.env.get(name);
  } catch (error) {
    if (error instanceof Deno.errors.NotCapable) {
      throw new CheckConfigError(
        `${name} cannot be read without --allow-env=${name}; run the check with deno task check`,
      );
    }
    throw error;
  }
}

function signed(seconds: number): string {
  return (seconds >= 0 ? "+" : "-") + Math.abs(seconds).toFixed(3);
}

/** A threshold as typed, never in exponent notation such as 1e-7. */
function plain(value: number): string {
  return value.toLocaleString("en-US", {
    maximumFractionDigits: 9,
    useGrouping: false,
  });
}

function milliseconds(seconds: number): string {
  const ms = seconds * 1000;
  return ms < 10 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`;
}

/** A URL safe to print: no user information, query or fragment. */
function safeUrl(url: URL): string {
  return url.origin + url.pathname;
}

/** Text from the network, made safe for a terminal and a one-line alert. */
function clean(text: string, max: number): string {
  // deno-lint-ignore no-control-regex
  const flat = text.replace(/[\u0000-\u001f\u007f-\u009f]+/g, " ").trim();
  return flat.length > max ? flat.slice(0, max - 1) + "…" : flat;
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
