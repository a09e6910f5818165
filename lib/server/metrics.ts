/**
 * `/metrics` on a listener of its own (METRICS_PORT, on METRICS_HOST,
 * loopback by default), in Prometheus's text exposition format 0.0.4,
 * written here: npm's prom-client took about 110 ns and a label string per
 * increment (a plain one 8 ns) and 20 MB of memory to load, for a format
 * this small. Every other request is 404.
 *
 * @module
 */

import { type FigureReading, LATENCY_BUCKETS } from "./figures.ts";

/** The exposition format's media type. */
export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Record<string, string | number>;
/** A sample: its labels, value, and the suffix of a histogram's series. */
type Sample = [labels: Labels, value: number, suffix?: string];

/** The figures as Prometheus's text format. */
export function exposition(reading: FigureReading): string {
  const out: string[] = [];
  const family = (
    [name, kind, help]: [string, string, string],
    samples: Sample[],
  ) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${kind}`);
    for (const [labels, value, suffix = ""] of samples) {
      out.push(`${name}${suffix}${labelText(labels)} ${value}`);
    }
  };
  const { busiestKeys: busiest, leaseHeld } = reading;
  family(
    [
      "integration_requests_total",
      "counter",
      "Requests answered, by route (unrouted: none matched) and status.",
    ],
    reading.requests.map(({ route, status, count }) => [
      { route, status },
      count,
    ]),
  );
  family(
    [
      "integration_auth_outcomes_total",
      "counter",
      "Decisions of the API-key step, by outcome.",
    ],
    Object.entries(reading.outcomes).map(([outcome, n]) => [{ outcome }, n]),
  );
  family(
    ["integration_lockouts_total", "counter", "Lock-outs started, by scope."],
    Object.entries(reading.lockouts).map(([scope, n]) => [{ scope }, n]),
  );
  family([
    "integration_locked_addresses",
    "gauge",
    "Address lock-outs started within LOCKOUT_SECONDS (in 10 s steps).",
  ], [[{}, reading.lockedAddresses]]);
  family([
    "integration_rate_limited_keys",
    "gauge",
    "Keys refused by their rate limit within the last minute.",
  ], [[{}, reading.rateLimitedKeys]]);
  family(
    [
      "integration_key_requests_total",
      "counter",
      "Requests with a valid key, for the busiest keys of the last minutes.",
    ],
    busiest.map(({ id, requests }) => [{ key_id: id }, requests]),
  );
  family(
    [
      "integration_key_rate_limited_total",
      "counter",
      "Requests refused by the key's rate limit, for the same keys.",
    ],
    busiest.map(({ id, rateLimited }) => [{ key_id: id }, rateLimited]),
  );
  const latency: Sample[] = [];
  for (const [method, { count, sum, buckets }] of reading.storeCalls) {
    let below = 0;
    LATENCY_BUCKETS.forEach((le, i) => {
      below += buckets[i];
      latency.push([{ method, le }, below, "_bucket"]);
    });
    latency.push(
      [{ method, le: "+Inf" }, count, "_bucket"],
      [{ method }, sum, "_sum"],
      [{ method }, count, "_count"],
    );
  }
  family([
    "integration_store_call_duration_seconds",
    "histogram",
    "Store calls from call to answer, by method.",
  ], latency);
  family([
    "integration_lease_held",
    "gauge",
    "1 while this server holds its lease and answers from memory, else 0.",
  ], leaseHeld === null ? [] : [[{}, leaseHeld ? 1 : 0]]);
  family([
    "integration_changes_applied_total",
    "counter",
    "Batches of key changes applied, each confirmed by the next lease renewal.",
  ], [[{}, reading.changesApplied]]);
  return out.join("\n") + "\n";
}

/** Every value here is a route, status, outcome, scope, method or key id; escaped anyway. */
function labelText(labels: Labels): string {
  const pairs = Object.entries(labels).map(([name, value]) =>
    `${name}="${
      String(value).replace(/[\\"\n]/g, (c) => c === "\n" ? "\\n" : `\\${c}`)
    }"`
  );
  return pairs.length === 0 ? "" : `{${pairs.join(",")}}`;
}

/** Serves `GET /metrics` from `read` on its own listener. */
export function serveMetrics(
  read: () => FigureReading,
  options: {
    hostname: string;
    port: number;
    onListen?: (addr: Deno.NetAddr) => void;
  },
): Deno.HttpServer<Deno.NetAddr> {
  const { hostname, port, onListen = () => {} } = options;
  return Deno.serve({ hostname, port, onListen }, (request) => {
    if (
      request.method !== "GET" || new URL(request.url).pathname !== "/metrics"
    ) {
      return new Response("Not found\n", { status: 404 });
    }
    return new Response(exposition(read()), {
      headers: { "content-type": CONTENT_TYPE },
    });
  });
}
