/**
 * `keys webhooks`: the endpoints every server sends signed events to, and
 * their deliveries. A `whsec_` secret is printed once, by `add` and
 * `rotate-secret`, on stdout like a key; nothing shows it again.
 *
 * @module
 */

import {
  type Delivery,
  EVENT_TYPES,
  type KeyEventType,
  type StoredEndpoint,
  type WebhookEndpoint,
} from "../store/webhook_types.ts";
import { eventId } from "../store/webhooks.ts";
import { endpointUrl, EndpointUrlError } from "../webhooks/endpoint_url.ts";
import { newSecret } from "../webhooks/sign.ts";
import type { Command, Context } from "./command.ts";
import { ConsoleError } from "./errors.ts";
import { jsonText, report, visible } from "./_output.ts";
import { inStore, storeField } from "./_store.ts";
import { type Column, headingLine, rowLine } from "./_table.ts";
import { refuseDiscardingStdout } from "./_delivery.ts";
import { waitForTest } from "./_webhook_test.ts";

const SUBCOMMANDS = [
  "add",
  "list",
  "remove",
  "rotate-secret",
  "test",
  "deliveries",
  "redeliver",
] as const;
type Subcommand = typeof SUBCOMMANDS[number];

/** Deliveries a table shows; `--json` gives every one kept. */
const SHOWN = 100;

export const webhooks: Command = {
  summary: "send signed key events to HTTPS endpoints (Standard Webhooks)",
  usage:
    "webhooks add URL [--events LIST] | list | remove ID | rotate-secret ID | test ID | deliveries [--endpoint ID] | redeliver DELIVERY_ID",
  options: {
    events: {
      type: "string",
      help: `events to send, by commas (default all): ${EVENT_TYPES.join(",")}`,
    },
    endpoint: { type: "string", help: "deliveries: only this endpoint's" },
  },
  positionals: [1, 2, "SUBCOMMAND"],
  notes: [
    "",
    "add and rotate-secret print the endpoint's whsec_ signing secret once, on",
    "stdout: give it to the receiver. HTTPS is required except to this host",
    "(127.0.0.0/8, ::1, localhost). The servers send only to WEBHOOK_HOSTS.",
    "test queues a webhook.test event that a running server sends at once, and",
    "reports what the receiver answered.",
  ],
  async run(ctx) {
    const [name, argument] = ctx.positionals;
    const sub = SUBCOMMANDS.find((s) => s === name);
    if (sub === undefined) {
      throw new ConsoleError(
        `Unknown webhooks command ${JSON.stringify(name)}; use one of ${
          SUBCOMMANDS.join(", ")
        }`,
        { code: "unknown_command" },
      );
    }
    const takes = sub === "list" || sub === "deliveries" ? 0 : 1;
    if (takes === 1 && argument === undefined) {
      throw new ConsoleError(
        `keys webhooks ${sub} needs ${
          sub === "add"
            ? "a URL"
            : sub === "redeliver"
            ? "a DELIVERY_ID"
            : "an endpoint ID"
        }; see keys webhooks --help`,
        { code: "argument_missing" },
      );
    }
    if (takes === 0 && argument !== undefined) {
      throw new ConsoleError(
        `keys webhooks ${sub} takes no argument; see keys webhooks --help`,
        { code: "argument_extra" },
      );
    }
    await RUN[sub](ctx, argument ?? "");
  },
};

const RUN: Record<Subcommand, (ctx: Context, arg: string) => Promise<void>> = {
  async add(ctx, text) {
    const url = checkedUrl(text);
    const events = requestedEvents(ctx.values.events);
    refuseDiscardingStdout();
    const { secret, signingKey } = newSecret();
    const endpoint = await ctx.store.webhooks.addEndpoint({
      url: url.href,
      events,
      signingKey,
    });
    try {
      deliverSecret(ctx, endpoint, secret);
    } catch (error) {
      await ctx.store.webhooks.removeEndpoint(endpoint.id);
      throw new ConsoleError(
        `The secret of webhook endpoint ${endpoint.id} could not be written to stdout (${
          error instanceof Error ? error.name : "failed"
        }), so the endpoint was removed again; run the command with stdout to a terminal, a file or a live pipe`,
        { code: "key_not_delivered" },
      );
    }
    report(
      `Added webhook endpoint ${endpoint.id} (${visible(endpoint.url)}) ${
        inStore(ctx)
      } for ${
        events.length === EVENT_TYPES.length ? "every event" : events.join(", ")
      }. Its signing secret is printed once, above: give it to the receiver; it is not shown again.`,
    );
  },

  async list(ctx) {
    const endpoints = (await ctx.store.webhooks.endpoints()).map(
      publicEndpoint,
    );
    if (ctx.json) return ctx.out.line(jsonText(endpoints));
    ctx.out.line(headingLine(ENDPOINT_COLUMNS));
    for (const endpoint of endpoints) {
      ctx.out.line(rowLine(ENDPOINT_COLUMNS, endpoint));
    }
    if (endpoints.length === 0) {
      report('No webhook endpoints; add one with "keys webhooks add URL"');
    }
  },

  async remove(ctx, id) {
    const removed = publicEndpoint(
      await ctx.store.webhooks.removeEndpoint(endpointId(id)),
    );
    if (ctx.json) {
      ctx.out.line(jsonText({ removed, ...storeField(ctx) }));
    }
    report(
      `Removed webhook endpoint ${removed.id} (${visible(removed.url)}) ${
        inStore(ctx)
      }; its pending deliveries are dropped within a minute.`,
    );
  },

  async "rotate-secret"(ctx, id) {
    refuseDiscardingStdout();
    const { secret, signingKey } = newSecret();
    const endpoint = await ctx.store.webhooks.setSigningKey(
      endpointId(id),
      signingKey,
    );
    deliverSecret(ctx, endpoint, secret);
    report(
      `Webhook endpoint ${endpoint.id} has a new signing secret, printed once, above; deliveries are signed with it from now on, and the old one no longer verifies.`,
    );
  },

  async test(ctx, id) {
    const endpoint = await findEndpoint(ctx, endpointId(id));
    const at = new Date();
    const delivery = await ctx.store.webhooks.enqueue({
      id: eventId(at),
      type: "webhook.test",
      timestamp: at.toISOString(),
      data: { endpointId: endpoint.id },
    }, endpoint.id);
    await waitForTest(ctx, delivery);
  },

  async deliveries(ctx) {
    const option = ctx.values.endpoint;
    const all = await ctx.store.webhooks.deliveries(
      typeof option === "string" ? { endpointId: endpointId(option) } : {},
    );
    if (ctx.json) return ctx.out.line(jsonText(all));
    ctx.out.line(headingLine(DELIVERY_COLUMNS));
    for (const delivery of all.slice(0, SHOWN)) {
      ctx.out.line(rowLine(DELIVERY_COLUMNS, delivery));
    }
    if (all.length > SHOWN) {
      report(`The latest ${SHOWN} of ${all.length}; --json gives them all`);
    }
  },

  async redeliver(ctx, id) {
    const delivery = await ctx.store.webhooks.redeliver(id, new Date());
    if (delivery === null) {
      throw new ConsoleError(
        `No delivery has id ${
          JSON.stringify(id)
        }; run "keys webhooks deliveries" to see them`,
        { code: "delivery_not_found" },
      );
    }
    if (ctx.json) ctx.out.line(jsonText(delivery));
    report(
      `Delivery ${delivery.id} (${delivery.event.type}) is queued for endpoint ${delivery.endpointId}; a running server sends it within a second.`,
    );
  },
};

/** The secret on stdout, now, or a throw: like a key, it must not be lost unnoticed. */
function deliverSecret(
  ctx: Context,
  endpoint: WebhookEndpoint,
  secret: string,
): void {
  ctx.out.deliver(
    (ctx.json
      ? jsonText({ ...publicEndpoint(endpoint), secret, ...storeField(ctx) })
      : secret) + "\n",
  );
}

/** An endpoint without its signing key. */
function publicEndpoint(endpoint: WebhookEndpoint): WebhookEndpoint {
  const { id, url, events, createdAt, secretSetAt } = endpoint;
  return { id, url, events, createdAt, secretSetAt };
}

function checkedUrl(text: string): URL {
  try {
    return endpointUrl(text);
  } catch (error) {
    if (!(error instanceof EndpointUrlError)) throw error;
    throw new ConsoleError(error.message, {
      code: error.code === "https_required"
        ? "https_required"
        : "invalid_value",
      usage: true,
    });
  }
}

function requestedEvents(
  option: string | boolean | undefined,
): KeyEventType[] {
  if (typeof option !== "string" || option.trim() === "all") {
    return [...EVENT_TYPES];
  }
  const asked = option.split(",").map((e) => e.trim()).filter(Boolean);
  const unknown = asked.filter((e) =>
    !(EVENT_TYPES as readonly string[]).includes(e)
  );
  if (asked.length === 0 || unknown.length > 0) {
    throw new ConsoleError(
      `--events takes event names by commas, or all; ${
        JSON.stringify(unknown[0] ?? option)
      } is not one of ${EVENT_TYPES.join(", ")}`,
      { code: "invalid_value" },
    );
  }
  return EVENT_TYPES.filter((e) => asked.includes(e));
}

function endpointId(text: string): number {
  if (!/^[1-9][0-9]{0,5}$/.test(text)) {
    throw new ConsoleError(
      `An endpoint ID is a number such as 1, not ${
        JSON.stringify(text)
      }; run "keys webhooks list" to see them`,
      { code: "invalid_value" },
    );
  }
  return Number(text);
}

async function findEndpoint(ctx: Context, id: number): Promise<StoredEndpoint> {
  const found = (await ctx.store.webhooks.endpoints()).find((e) => e.id === id);
  if (found === undefined) {
    throw new ConsoleError(
      `No webhook endpoint has id ${id}; run "keys webhooks list" to see them`,
      { code: "endpoint_not_found" },
    );
  }
  return found;
}

const ENDPOINT_COLUMNS: Column<WebhookEndpoint>[] = [
  { heading: "ID", width: 4, cell: (e) => String(e.id) },
  { heading: "URL", width: 48, cell: (e) => e.url },
  {
    heading: "EVENTS",
    width: 40,
    cell: (e) =>
      e.events.length === EVENT_TYPES.length ? "all" : e.events.join(","),
  },
  { heading: "SECRET SET", width: 24, cell: (e) => e.secretSetAt },
];

const DELIVERY_COLUMNS: Column<Delivery>[] = [
  { heading: "DELIVERY", width: 36, cell: (d) => d.id },
  { heading: "TYPE", width: 19, cell: (d) => d.event.type },
  { heading: "STATE", width: 9, cell: (d) => d.state },
  { heading: "TRIES", width: 5, cell: (d) => String(d.tries) },
  { heading: "LAST", width: 13, cell: (d) => outcome(d) },
  { heading: "DUE OR DONE", width: 24, cell: (d) => d.dueAt },
];

/** The last try's outcome: a status, or why there was none. */
function outcome(delivery: Delivery): string {
  const last = delivery.attempts.at(-1);
  if (last === undefined) return "-";
  return last.status === null ? last.error ?? "-" : String(last.status);
}
