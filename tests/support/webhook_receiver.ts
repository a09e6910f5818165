/**
 * A loopback webhook receiver, as an integrator would write one: every
 * request is verified with the `standardwebhooks` reference library and the
 * secret `keys webhooks add` printed, and recorded. Its answer can be set
 * (a status, or hanging until released) to play a receiver that fails.
 *
 * @module
 */

import { Webhook } from "standardwebhooks";

/** One verified delivery as the receiver got it. */
export interface Received {
  id: string;
  type: string;
  data: Record<string, unknown>;
  /** The body and headers exactly as they came, to search for secrets. */
  raw: string;
}

/** How the receiver answers the next requests. */
export type Behaviour = { status: number } | { hang: true };

export interface Receiver extends AsyncDisposable {
  url: string;
  /** Verified deliveries, in arrival order, repeats included. */
  received: Received[];
  /** Requests that failed verification. */
  unverified: number;
  /** Requests under way that hang. */
  hanging: number;
  /** Sets the secret to verify with (from `keys webhooks add`). */
  verifyWith(secret: string): void;
  behave(behaviour: Behaviour): void;
  /** Answers every hanging request with `status`. */
  release(status: number): void;
}

/** Starts a receiver on 127.0.0.1 at a free port, answering 204. */
export function startReceiver(path = "/hooks"): Receiver {
  let webhook: Webhook | null = null;
  let behaviour: Behaviour = { status: 204 };
  const held: ((status: number) => void)[] = [];
  const receiver: Receiver = {
    url: "",
    received: [],
    unverified: 0,
    hanging: 0,
    verifyWith(secret) {
      webhook = new Webhook(secret);
    },
    behave(next) {
      behaviour = next;
    },
    release(status) {
      for (const answer of held.splice(0)) answer(status);
    },
    async [Symbol.asyncDispose]() {
      receiver.release(503);
      await server.shutdown();
    },
  };
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (request) => {
      const body = await request.text();
      const headers = Object.fromEntries(request.headers);
      let payload: { type: string; data: Record<string, unknown> };
      try {
        payload = webhook!.verify(body, headers) as typeof payload;
      } catch {
        receiver.unverified++;
        return new Response(null, { status: 400 });
      }
      receiver.received.push({
        id: headers["webhook-id"],
        type: payload.type,
        data: payload.data,
        raw: JSON.stringify(headers) + body,
      });
      const now = behaviour;
      if ("status" in now) return new Response(null, { status: now.status });
      receiver.hanging++;
      const status = await new Promise<number>((resolve) => held.push(resolve));
      receiver.hanging--;
      return new Response(null, { status });
    },
  );
  receiver.url = `http://127.0.0.1:${server.addr.port}${path}`;
  return receiver;
}

/** The distinct event ids received of each type: what a receiver that drops repeats acts on. */
export function distinctByType(received: Received[]): Map<string, Set<string>> {
  const types = new Map<string, Set<string>>();
  for (const { id, type } of received) {
    if (!types.has(type)) types.set(type, new Set());
    types.get(type)!.add(id);
  }
  return types;
}
