/**
 * The check's configuration: environment variables only, never arguments,
 * as arguments end up in shell history and process lists and the key is a
 * credential. Every problem names the variable and its fix, never its value.
 *
 * @module
 */

import {
  isWellFormedApiKey,
  KEY_LENGTH,
  KEY_PATTERN,
} from "../auth/api_key.ts";
import { CONNECTION_PATH } from "../routes/connection.ts";

/** The environment variables the check reads; the `check` task allows exactly these. */
export const CHECK_ENV = {
  baseUrl: "INTEGRATION_BASE_URL",
  apiKey: "INTEGRATION_API_KEY",
  maxOffset: "CHECK_MAX_OFFSET_SECONDS",
  timeout: "CHECK_TIMEOUT_SECONDS",
  allowPlainHttp: "CHECK_ALLOW_PLAIN_HTTP",
  expiryWarningDays: "CHECK_EXPIRY_WARNING_DAYS",
} as const;

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
  /** A key that expires within this many days is a WARNING. */
  expiryWarningDays: number;
}

/** A configuration problem; its message names the variable and the fix, never its value. */
export class CheckConfigError extends Error {
  override name = "CheckConfigError";
}

// The values when the variables are unset, and the longest timeout.
export const DEFAULT_MAX_OFFSET_SECONDS = 30;
export const DEFAULT_TIMEOUT_SECONDS = 10;
export const DEFAULT_EXPIRY_WARNING_DAYS = 14;
export const MAX_TIMEOUT_SECONDS = 300;

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
    expiryWarningDays: readDays(env, CHECK_ENV.expiryWarningDays),
  };
}

function readDays(env: EnvReader, name: string): number {
  const raw = (env(name) ?? "").trim();
  if (raw === "") return DEFAULT_EXPIRY_WARNING_DAYS;
  // 0 turns the warning off; whole days, up to about 27 years.
  if (!/^\d{1,4}$/.test(raw)) {
    throw new CheckConfigError(
      `${name} must be a whole number of days from 0 to 9999, such as ${DEFAULT_EXPIRY_WARNING_DAYS}`,
    );
  }
  return Number(raw);
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
      `${name} must stop before /api/v1; the check adds ${CONNECTION_PATH} itself`,
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
  return new URL(prefix + CONNECTION_PATH, url.origin);
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

/** The key as far as it can be read, to scrub it from the output; empty when unreadable. */
export function readKeyQuietly(env: EnvReader): string {
  try {
    return (env(CHECK_ENV.apiKey) ?? "").trim();
  } catch {
    // readCheckConfig reports the same variable with its fix.
    return "";
  }
}

/**
 * A variable the check may not read is a configuration error naming the task,
 * not unset as in lib/server/config.ts: else it would read as a missing key.
 */
export function strictProcessEnv(name: string): string | undefined {
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
