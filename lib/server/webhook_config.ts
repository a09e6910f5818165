/**
 * The server's webhook settings: which hosts deliveries may reach (the start
 * task grants exactly these), how soon a failed delivery is retried, and the
 * expiry reminders. Endpoints themselves are in the store (`keys webhooks`).
 *
 * @module
 */

/** Reads one variable (lib/server/config.ts's EnvReader). */
type EnvReader = (name: string) => string | undefined;

/** What the sender is told. */
export interface WebhookConfig {
  /** Hosts (`host` or `host:port`) the server may send deliveries to. */
  hosts: string[];
  /** The first retry's delay; each further one doubles, up to an hour. */
  retrySeconds: number;
  /** Days before a key's expiry at which `key.expiring` is sent, once each. */
  expiringDays: number[];
}

/** The webhook settings, or the problem with them, worded for the operator. */
export function readWebhookConfig(env: EnvReader): WebhookConfig | string {
  const hosts = list(env("WEBHOOK_HOSTS"));
  for (const host of hosts) {
    if (!/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(:\d{1,5})?$/.test(host)) {
      return (`WEBHOOK_HOSTS must list hosts such as hooks.example.com or 127.0.0.1:8080, separated by commas; ${
        JSON.stringify(host)
      } is not one`);
    }
  }
  const retry = env("WEBHOOK_RETRY_SECONDS")?.trim() || "5";
  const retrySeconds = Number(retry);
  if (!(retrySeconds >= 0.01 && retrySeconds <= 3600)) {
    return (`WEBHOOK_RETRY_SECONDS must be a number of seconds from 0.01 to 3600, not ${
      JSON.stringify(retry)
    }`);
  }
  const days = list(env("WEBHOOK_EXPIRING_DAYS") ?? "14,1");
  const expiringDays = days.map(Number);
  if (!expiringDays.every((d) => Number.isInteger(d) && d >= 1 && d <= 365)) {
    return (`WEBHOOK_EXPIRING_DAYS must list whole days from 1 to 365, such as 14,1; not ${
      JSON.stringify(days.join(","))
    }`);
  }
  return { hosts, retrySeconds, expiringDays };
}

function list(raw: string | undefined): string[] {
  return (raw ?? "").split(",").map((item) => item.trim()).filter(Boolean);
}
