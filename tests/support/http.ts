/**
 * The service over HTTP as the tests meet it: every answer validated
 * against openapi.json, raw bytes where fetch cannot go, and what a handler
 * called in-process receives from `Deno.serve`.
 *
 * @module
 */

import { validateResponse } from "./openapi.ts";
import { GIVE_UP_MS } from "./wait.ts";

/** What `Deno.serve` tells a handler about a TCP client at `hostname`. */
export function serveInfo(
  hostname = "192.0.2.10",
): Deno.ServeHandlerInfo<Deno.NetAddr> {
  return {
    remoteAddr: { transport: "tcp", hostname, port: 40000 },
    completed: Promise.resolve(),
  };
}

/**
 * fetch() for the service: every answer is validated against openapi.json
 * (throwing on any breach) and handed back as an equivalent Response. The
 * suite receives its responses through here, so the document cannot drift
 * from what the service really answers.
 */
export async function request(
  url: string,
  init: RequestInit & { client?: Deno.HttpClient } = {},
): Promise<Response> {
  const response = await fetch(url, init);
  const body = await response.text();
  const method = init.method ?? "GET";
  validateResponse({ method, path: new URL(url).pathname }, {
    status: response.status,
    headers: response.headers,
    body,
  });
  const empty = method === "HEAD" || [204, 304].includes(response.status);
  return new Response(empty ? null : body, {
    status: response.status,
    headers: response.headers,
  });
}

/** Validates a response the handler returned directly, as `request()` does. */
export async function validated(
  request: Request,
  response: Response,
): Promise<Response> {
  const body = await response.text();
  validateResponse({
    method: request.method,
    path: new URL(request.url).pathname,
  }, {
    status: response.status,
    headers: response.headers,
    body,
  });
  const empty = request.method === "HEAD" ||
    [204, 304].includes(response.status);
  return new Response(empty ? null : body, {
    status: response.status,
    headers: response.headers,
  });
}

/** GETs the connection route with a key; returns status, headers and body. */
export async function check(
  url: string,
  key?: string,
): Promise<{ status: number; headers: Headers; body: string }> {
  const response = await request(`${url}/api/v1/integration/connection`, {
    headers: key === undefined ? {} : { "X-API-Key": key },
  });
  return {
    status: response.status,
    headers: response.headers,
    body: await response.text(),
  };
}

/**
 * Sends raw bytes over TCP, where fetch cannot (malformed requests), and
 * returns the status of the first response, or 0 when the server answered
 * none before closing or within the time limit.
 */
export async function rawStatus(
  port: number,
  bytes: Uint8Array | string,
  options: { hostname?: string; timeoutMs?: number } = {},
): Promise<number> {
  const conn = await Deno.connect({
    hostname: options.hostname ?? "127.0.0.1",
    port,
  });
  const data = typeof bytes === "string"
    ? new TextEncoder().encode(bytes)
    : bytes;
  // Only ends a wait for a server that never answers nor closes: every
  // request the tests send is answered or closed at once, however late a
  // busy machine gets there.
  const timer = setTimeout(
    () => conn.close(),
    options.timeoutMs ?? GIVE_UP_MS,
  );
  let text = "";
  try {
    await conn.write(data).catch(() => 0);
    const buffer = new Uint8Array(16 * 1024);
    while (!/^HTTP\/1\.[01] \d{3}[^\n]*\n/.test(text)) {
      const n = await conn.read(buffer).catch(() => null);
      if (n === null) break;
      text += new TextDecoder("latin1").decode(buffer.subarray(0, n));
    }
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // closed by the timer
    }
  }
  return Number(text.match(/^HTTP\/1\.[01] (\d{3})/)?.[1] ?? 0);
}
