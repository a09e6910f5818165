/**
 * The request log (lib/http/log.ts): every line written whole and in
 * order whatever its length or characters, nothing left behind by a
 * flush, and a reader that stalls costing dropped lines, counted, never
 * memory without bound.
 */

import assert from "node:assert/strict";
import fc from "fast-check";
import { JsonLog } from "../../lib/http/log.ts";

/** A writer that keeps what it is given, and can be held. */
class Collector {
  chunks: Uint8Array[] = [];
  #held: Promise<void> | null = null;
  #release: (() => void) | null = null;

  hold(): void {
    this.#held = new Promise((resolve) => (this.#release = resolve));
  }

  release(): void {
    this.#release?.();
    this.#held = null;
  }

  async write(bytes: Uint8Array): Promise<number> {
    if (this.#held) await this.#held;
    // A copy: a writer owns nothing after its write returns.
    this.chunks.push(bytes.slice());
    return bytes.length;
  }

  lines(): Record<string, unknown>[] {
    const text = new TextDecoder().decode(
      new Uint8Array(this.chunks.flatMap((chunk) => [...chunk])),
    );
    assert.ok(text === "" || text.endsWith("\n"), "every line is whole");
    return text.split("\n").filter((line) => line !== "").map((line) =>
      JSON.parse(line)
    );
  }
}

Deno.test("the log writes every line whole and in order, whatever its length or characters, across flushes", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.array(
        fc.record({
          text: fc.oneof(
            fc.string({ unit: "grapheme", maxLength: 300 }),
            fc.string({ unit: "binary", maxLength: 50 }),
            // Longer than a batch: written by itself, after what is queued.
            fc.constant("é€😀".repeat(30_000)),
          ),
          flush: fc.boolean(),
        }),
        { maxLength: 60 },
      ),
      async (entries) => {
        const out = new Collector();
        const log = new JsonLog({ out, delayMs: 60_000 });
        for (const [i, { text, flush }] of entries.entries()) {
          log.write({ msg: "line", i, text });
          if (flush) log.flush();
        }
        log.flush();
        await log.settled();
        const lines = out.lines();
        assert.deepEqual(
          lines.map((line) => [line.i, line.text]),
          entries.map(({ text }, i) => [i, text]),
        );
        assert.equal(log.dropped, 0);
      },
    ),
    { numRuns: 60 },
  );
});

Deno.test("request lines carry the fields given, a client's text escaped", async () => {
  const out = new Collector();
  const log = new JsonLog({ out, delayMs: 60_000 });
  const given = {
    requestId: "ab-1",
    method: "GET",
    path: '/x"\n\u2028',
    status: 200,
    durationMs: 0.25,
    client: "198.51.100.7",
    apiKeyId: 3,
  };
  log.request(given);
  log.flush();
  await log.settled();
  const [line] = out.lines();
  assert.equal(typeof line.time, "string");
  const { time: _, ...fields } = line;
  assert.deepEqual(fields, { msg: "request", ...given });
});

Deno.test("a request line carries a hint only when given, escaped as a client's text", async () => {
  const out = new Collector();
  const log = new JsonLog({ out, delayMs: 60_000 });
  const line = {
    requestId: "ab-2",
    method: "GET",
    path: "/x",
    status: 401,
    durationMs: 0.5,
    client: "198.51.100.7",
  };
  const hint = 'a key was sent in Authorization, "not read"\n';
  log.request({ ...line, hint });
  log.request(line);
  log.flush();
  await log.settled();
  const [hinted, plain] = out.lines();
  assert.equal(hinted.hint, hint);
  assert.equal(hinted.status, 401);
  assert.ok(!("hint" in plain));
});

Deno.test("a stalled reader costs dropped lines, counted and reported once it reads again, never unbounded memory", async () => {
  const out = new Collector();
  out.hold();
  const log = new JsonLog({ out, delayMs: 60_000, maxQueuedBytes: 4096 });
  for (let i = 0; i < 400; i++) {
    log.write({ msg: "line", i });
    log.flush();
  }
  assert.ok(log.dropped > 0, "lines past the bound are dropped");
  const dropped = log.dropped;
  out.release();
  await log.settled();
  log.write({ msg: "after" });
  log.flush();
  await log.settled();
  const lines = out.lines();
  const written = lines.filter((line) => line.msg === "line").length;
  assert.equal(written + dropped, 400, "every line written or counted");
  assert.ok(written * 20 <= 4096 + 20, "no more queued than the bound");
  const report = lines.find((line) => line.msg === "log_lines_dropped");
  assert.equal(report?.count, dropped);
  assert.equal(lines.at(-1)?.msg, "after");
});

Deno.test("a stalled reader holds no more memory than the bound, however many small batches wait", async () => {
  // Each write's bytes as handed over: what the log keeps alive for it.
  const held: Uint8Array[] = [];
  let release!: () => void;
  const stalled = new Promise<void>((resolve) => (release = resolve));
  const out = {
    async write(bytes: Uint8Array): Promise<number> {
      held.push(bytes);
      await stalled;
      return bytes.length;
    },
  };
  const bound = 64 * 1024;
  const log = new JsonLog({ out, delayMs: 60_000, maxQueuedBytes: bound });
  // One line per flush, as a quiet server's 20 ms timer makes them.
  for (let i = 0; i < 2_000; i++) {
    log.write({ msg: "line", i });
    log.flush();
  }
  // Only the first write has started; the others wait in the chain, so
  // count what every queued write will hand over, by its backing memory.
  release();
  await log.settled();
  const kept = held.reduce((sum, bytes) => sum + bytes.buffer.byteLength, 0);
  assert.ok(log.dropped > 0, "lines past the bound are dropped");
  assert.ok(
    kept <= bound + 1024,
    `queued writes kept ${kept} bytes alive, over the ${bound} bound`,
  );
});
