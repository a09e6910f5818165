/**
 * Requests as many clients send them: one TCP connection per request, each
 * bound to its own source address in 127.0.0.0/8, so that the server sees
 * as many client addresses as the test or attack asks for. Loopback only.
 *
 * Deno.connect cannot choose a source address; node:http's `localAddress`
 * can.
 *
 * @module
 */

import http from "node:http";

/** The status of one GET of `path` with `key` in X-API-Key, sent from `from`. */
export function statusFrom(
  port: number,
  options: { from: string; path: string; key: string | null },
): Promise<number> {
  if (!options.from.startsWith("127.")) {
    throw new RangeError(`${options.from} is not a loopback address`);
  }
  return new Promise((resolve, reject) => {
    const request = http.get({
      host: "127.0.0.1",
      port,
      path: options.path,
      localAddress: options.from,
      agent: false,
      headers: options.key === null ? {} : { "X-API-Key": options.key },
    }, (response) => {
      response.resume();
      response.on("end", () => resolve(response.statusCode ?? 0));
    });
    request.on("error", reject);
  });
}

/**
 * The i-th of a run of addresses, `perNetwork` to each /24 from
 * 127.`first`.0.0 on (hosts 1 to `perNetwork`), so that networks fill as an
 * attacker spreading over /24s fills them.
 */
export function spreadAddress(
  i: number,
  options: { first: number; perNetwork: number },
): string {
  const network = Math.floor(i / options.perNetwork);
  const host = 1 + (i % options.perNetwork);
  const b = options.first + (network >> 8);
  if (b > 255) throw new RangeError(`address ${i} is past 127.255.255.0/24`);
  return `127.${b}.${network & 255}.${host}`;
}

/**
 * Runs `count` calls of `send(i)`, `concurrency` at a time; returns how
 * many answers had each status.
 */
export async function sendAll(
  count: number,
  send: (i: number) => Promise<number>,
  options: { concurrency?: number } = {},
): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const status = await send(next++);
      statuses.set(status, (statuses.get(status) ?? 0) + 1);
    }
  };
  await Promise.all(
    Array.from({ length: options.concurrency ?? 32 }, worker),
  );
  return statuses;
}
