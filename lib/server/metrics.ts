/**
 * `/metrics` on a listener of its own (METRICS_PORT, on METRICS_HOST,
 * loopback by default), in Prometheus's text exposition format 0.0.4,
 * written here: npm's prom-client took about 110 ns and a label string per
 * increment (a plain one 8 ns) and 20 MB of memory to load, for a format
 * this small. Every other request is 404. The listener is guarded as the
 * integrators' port is (lib/server/serve.ts): `Deno.serve` ends the process
 * when a flood of connections runs it out of descriptors, and keeps a head
 * that never ends open for ever.
 *
 * @module
 */

import { type FigureReading, LATENCY_BUCKETS } from "./figures.ts";
import {
  type ConnectionLimits,
  type GuardedServer,
  type ServeEvent,
  serveGuarded,
} from "./serve.ts";

/**
 * Connections the metrics listener keeps: a scraper or two hold one each.
 * Few, so a flood there leaves the integrators' port its descriptors.
 */
export const METRICS_CONNECTIONS = 16;

/** The exposition format's media type. */
export const CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

type Labels = Record<string, string | number>;
/** Labels, value, and for a histogram the series' suffix. */
type Sample = [labels: Labels, value: number, suffix?: string];

/** The figures as Prometheus's text format. */
export function exposition(reading: FigureReading): string {
  const { busiestKeys: busiest, leaseHeld } = reading;
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
  const requests = reading.requests.map((r): Sample => [
    { route: r.route, status: r.status },
    r.count,
  ]);
  const families: [string, string, string, Sample[]][] = [
    [
      "integration_requests_total",
      "counter",
      "Requests answered, by route (unrouted: none matched) and status.",
      requests,
    ],
    [
      "integration_auth_outcomes_total",
      "counter",
      "Decisions of the API-key step, by outcome.",
      Object.entries(reading.outcomes).map(([outcome, n]) => [{ outcome }, n]),
    ],
    [
      "integration_lockouts_total",
      "counter",
      "Lock-outs started, by scope.",
      Object.entries(reading.lockouts).map(([scope, n]) => [{ scope }, n]),
    ],
    [
      "integration_locked_addresses",
      "gauge",
      "Address lock-outs started within LOCKOUT_SECONDS (in 10 s steps).",
      [[{}, reading.lockedAddresses]],
    ],
    [
      "integration_rate_limited_keys",
      "gauge",
      "Keys refused by their rate limit within the last minute.",
      [[{}, reading.rateLimitedKeys]],
    ],
    [
      "integration_key_requests_total",
      "counter",
      "Requests with a valid key, rate-limited ones included, for the busiest keys of the last minutes.",
      busiest.map((k) => [{ key_id: k.id }, k.requests]),
    ],
    [
      "integration_key_rate_limited_total",
      "counter",
      "Requests refused by the key's rate limit, for the same keys.",
      busiest.map((k) => [{ key_id: k.id }, k.rateLimited]),
    ],
    [
      "integration_store_call_duration_seconds",
      "histogram",
      "Store calls from call to answer, by method.",
      latency,
    ],
    [
      "integration_lease_held",
      "gauge",
      "1 while this server holds its lease and answers from memory, else 0.",
      leaseHeld === null ? [] : [[{}, leaseHeld ? 1 : 0]],
    ],
    [
      "integration_changes_applied_total",
      "counter",
      "Batches of key changes applied, each confirmed by the next lease renewal.",
      [[{}, reading.changesApplied]],
    ],
  ];
  const out: string[] = [];
  for (const [name, kind, help, samples] of families) {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${kind}`);
    for (const [labels, value, suffix = ""] of samples) {
      out.push(`${name}${suffix}${labelText(labels)} ${value}`);
    }
  }
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

/** Serves `GET /metrics` (and HEAD) from `read` on its own guarded listener. */
export function serveMetrics(
  read: () => FigureReading,
  options: {
    hostname: string;
    port: number;
    /** The header and idle timeouts; at most {@linkcode METRICS_CONNECTIONS} connections. */
    limits?: Partial<ConnectionLimits>;
    onListen?: (addr: Deno.NetAddr) => void;
    onEvent?: (event: ServeEvent) => void;
  },
): GuardedServer {
  const { hostname, port, onListen = () => {}, onEvent } = options;
  return serveGuarded((request) => {
    if (new URL(request.url).pathname !== "/metrics") {
      return new Response("Not found\n", { status: 404 });
    }
    // HEAD as the integrators' routes answer it: a probe's check that the
    // listener is up. The body is dropped by Deno.serve.
    if (request.method !== "GET" && request.method !== "HEAD") {
      return new Response("Method not allowed; use GET\n", {
        status: 405,
        headers: { allow: "GET, HEAD" },
      });
    }
    return new Response(exposition(read()), {
      headers: { "content-type": CONTENT_TYPE },
    });
  }, {
    hostname,
    port,
    limits: { ...options.limits, maxConnections: METRICS_CONNECTIONS },
    onListen: (addr) => onListen(addr as Deno.NetAddr),
    onEvent,
  });
}
