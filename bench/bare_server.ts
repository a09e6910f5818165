/**
 * The physical limit the benchmark compares against: a `Deno.serve` that
 * returns the connection check's JSON shape and headers with no
 * authentication, no store and no logging. On 127.0.0.1:PORT, or on the
 * Unix socket SOCKET when it is set (behind nginx, as the service).
 *
 * @module
 */

import { statusBody } from "./status_body.ts";

const port = Number(Deno.env.get("PORT") ?? 8001);
const socket = Deno.env.get("SOCKET");
const handler = () =>
  new Response(
    statusBody(),
    {
      headers: {
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "content-type": "application/json",
      },
    },
  );
if (socket) {
  try {
    Deno.removeSync(socket);
  } catch {
    // none left behind
  }
  Deno.serve({ path: socket, onListen: () => {} }, handler);
} else Deno.serve({ port, hostname: "127.0.0.1", onListen: () => {} }, handler);
console.log(
  JSON.stringify({ msg: "listening", address: `http://127.0.0.1:${port}` }),
);
