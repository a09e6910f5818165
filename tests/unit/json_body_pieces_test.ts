/**
 * A body sent in many tiny pieces (HTTP/1.1 chunks of one byte each) costs
 * the server a read per piece: 60,000 of them held a server's event loop for
 * seconds, its valid-key requests waiting with it. The reader gives up past
 * a bound on pieces, far above what a whole body sent at once arrives in.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { MAX_BODY_PIECES, readJsonBody } from "../../lib/http/json_body.ts";

const MAX_BYTES = 64 * 1024;

/** A JSON list of `bytes` bytes, as a POST whose body arrives `piece` bytes at a time; `pulled` counts the pieces taken. */
function piecewise(bytes: number, piece: number) {
  const text = JSON.stringify(["x".repeat(Math.max(0, bytes - 4))]);
  const encoded = new TextEncoder().encode(text);
  const state = { pulled: 0 };
  let at = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (at >= encoded.length) return controller.close();
      state.pulled++;
      controller.enqueue(encoded.slice(at, at + piece));
      at += piece;
    },
  });
  const request = new Request("http://localhost/api/v1/keys/leaked", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  return { request, state, text };
}

Deno.test("a body in one-byte pieces is refused once it passes the bound on pieces, not read to its end", async () => {
  const { request, state } = piecewise(60_000, 1);
  const read = await readJsonBody(request, { maxBytes: MAX_BYTES });
  assert.equal(read.ok, false);
  assert.match(
    (read as { message: string }).message,
    new RegExp(`more than ${MAX_BODY_PIECES} pieces`),
  );
  // The stream may have one piece queued ahead of the reader.
  assert.ok(state.pulled <= MAX_BODY_PIECES + 2, `${state.pulled} pieces read`);
});

Deno.test("a body of at most the largest size is read whole when its pieces are at least 1 KiB, or it has few", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 4, max: MAX_BYTES }),
      fc.integer({ min: 1, max: MAX_BYTES }),
      async (bytes, piece) => {
        fc.pre(piece >= 1024 || Math.ceil(bytes / piece) <= MAX_BODY_PIECES);
        const { request, text } = piecewise(bytes, piece);
        const read = await readJsonBody(request, { maxBytes: MAX_BYTES });
        assert.deepEqual(read, { ok: true, value: JSON.parse(text) });
      },
    ),
    { numRuns: 50 },
  );
});
