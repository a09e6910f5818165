/**
 * `keys webhooks test`: waits for a running server to send the queued test
 * event (the servers hold the network permission, not the console) and
 * reports what the receiver answered.
 *
 * @module
 */

import type { Attempt, Delivery } from "../store/webhook_types.ts";
import { delivered } from "../webhooks/send.ts";
import type { Context } from "./command.ts";
import { ConsoleError } from "./errors.ts";
import { jsonText, report } from "./_output.ts";

/** A try's deadline (10 s) and a claim's slack, with room for a busy machine. */
const WAIT_MS = 30_000;
const POLL_MS = 100;

/** Waits for the first try of `queued`; throws unless the receiver answered 2xx. */
export async function waitForTest(
  ctx: Context,
  queued: Delivery,
): Promise<void> {
  if ((await ctx.store.instances()).length === 0) {
    throw new ConsoleError(
      `No server is running to send the test (delivery ${queued.id} stays queued); start one with deno task start, then run the test again`,
      { code: "webhook_test_failed" },
    );
  }
  const deadline = Date.now() + WAIT_MS;
  let attempt: Attempt | undefined;
  while (attempt === undefined && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    const found = (await ctx.store.webhooks.deliveries({
      endpointId: queued.endpointId,
    })).find((d) => d.id === queued.id);
    attempt = found?.attempts[0];
  }
  if (attempt === undefined) {
    throw new ConsoleError(
      `No server sent the test within ${
        WAIT_MS / 1000
      } s (delivery ${queued.id}); see the servers' log for webhook_round_failed`,
      { code: "webhook_test_failed" },
    );
  }
  if (!delivered(attempt)) {
    throw new ConsoleError(
      `Endpoint ${queued.endpointId} ${answer(attempt)}; ${fix(attempt)}`,
      { code: "webhook_test_failed" },
    );
  }
  if (ctx.json) {
    ctx.out.line(jsonText({
      deliveryId: queued.id,
      endpointId: queued.endpointId,
      status: attempt.status,
      ms: attempt.ms,
    }));
  }
  report(
    `Endpoint ${queued.endpointId} ${answer(attempt)} in ${attempt.ms} ms.`,
  );
}

function answer(attempt: Attempt): string {
  if (attempt.status !== null) return `answered ${attempt.status}`;
  switch (attempt.error) {
    case "timeout":
      return "did not answer in time";
    case "not_permitted":
      return "may not be reached by the servers";
    default:
      return "could not be reached";
  }
}

function fix(attempt: Attempt): string {
  if (attempt.error === "not_permitted") {
    return "add its host to WEBHOOK_HOSTS and restart the servers";
  }
  if (attempt.status !== null) {
    return "the receiver must answer 2xx to a verified delivery: check its logs";
  }
  return "check that the receiver runs and that the servers can reach it";
}
