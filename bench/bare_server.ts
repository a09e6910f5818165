/**
 * The physical limit the benchmark compares against: a `Deno.serve` that
 * returns the connection check's JSON shape and headers with no
 * authentication, no store and no logging.
 *
 * @module
 */

const port = Number(Deno.env.get("PORT") ?? 8001);
Deno.serve(
  { port, hostname: "127.0.0.1", onListen: () => {} },
  () =>
    new Response(
      JSON.stringify({
        connected: true,
        authenticatedByApiKey: true,
        apiKeyId: 1,
        email: "ops@example.com",
        serverUtc: new Date().toISOString(),
      }),
      {
        headers: {
          "cache-control": "no-store",
          "x-content-type-options": "nosniff",
          "content-type": "application/json",
        },
      },
    ),
);
console.log(
  JSON.stringify({ msg: "listening", address: `http://127.0.0.1:${port}` }),
);
