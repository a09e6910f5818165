/**
 * JSON lines on stdout, buffered: one write per batch instead of one per
 * request, so that logging every request stays on under load.
 *
 * Writes are asynchronous and bounded: a log reader that stalls (a paused
 * shipper, a full pipe) must not stall the server, and one that goes away
 * (a broken pipe) must not stop it. Past `maxQueuedBytes` waiting to be
 * written, lines are dropped and counted; after a failed write, logging
 * stops with one line on stderr.
 *
 * @module
 */

import { writeAll } from "../util/write_all.ts";

/** The fields of one request's log line (never a key, header value or query string). */
export interface RequestLogLine {
  requestId: string;
  method: string;
  path: string;
  status: number;
  durationMs: number;
  client: string;
  apiKeyId?: number;
}

/** Bytes gathered before a write; a longer line is written by itself. */
const BATCH_BYTES = 64 * 1024;
const NEWLINE = 0x0a;

/**
 * Writes one JSON object per line to stdout.
 *
 * Each line is encoded into the batch's bytes as it is queued, so that no
 * string outlives its request: strings kept for a 20 ms batch lived long
 * enough for the garbage collector to move them to the old generation, and
 * cost the server about 17 MB of memory and 3 µs a request under load.
 */
export class JsonLog {
  #batch = new Uint8Array(BATCH_BYTES);
  #used = 0;
  #count = 0;
  #lastMs = 0;
  #lastTime = "";
  #timer: ReturnType<typeof setTimeout> | undefined;
  #encoder = new TextEncoder();
  #delayMs: number;
  #out: { write(bytes: Uint8Array): Promise<number> };
  #maxQueued: number;
  #queued = 0;
  #dropped = 0;
  #broken = false;
  #chain: Promise<void> = Promise.resolve();

  /**
   * Lines wait at most `delayMs` (default 20 ms) before they are written to
   * `out` (default stdout); at most `maxQueuedBytes` (default 4 MiB) wait.
   */
  constructor(
    options: {
      delayMs?: number;
      out?: { write(bytes: Uint8Array): Promise<number> };
      maxQueuedBytes?: number;
    } = {},
  ) {
    this.#delayMs = options.delayMs ?? 20;
    this.#out = options.out ?? Deno.stdout;
    this.#maxQueued = options.maxQueuedBytes ?? 4 * 1024 * 1024;
  }

  /** Lines dropped because the reader did not keep up. */
  get dropped(): number {
    return this.#dropped;
  }

  /** Resolves once everything flushed so far is written (or dropped). */
  settled(): Promise<void> {
    return this.#chain;
  }

  /** Queues one line; `time` is added first. */
  write(fields: Record<string, unknown>): void {
    this.#push(JSON.stringify({ time: this.#time(), ...fields }));
  }

  /**
   * Queues one request's line. Built by hand, the hottest line costs a third
   * of `JSON.stringify` on an object; every string from the client is still
   * escaped by it.
   */
  request(line: RequestLogLine): void {
    const key = line.apiKeyId === undefined
      ? ""
      : `,"apiKeyId":${line.apiKeyId}`;
    this.#push(
      `{"time":"${this.#time()}","msg":"request","requestId":"${line.requestId}","method":${
        JSON.stringify(line.method)
      },"path":${
        JSON.stringify(line.path)
      },"status":${line.status},"durationMs":${line.durationMs},"client":${
        JSON.stringify(line.client)
      }${key}}`,
    );
  }

  /** The ISO time, formatted once per millisecond however many lines share it. */
  #time(): string {
    const now = Date.now();
    if (now !== this.#lastMs) {
      this.#lastMs = now;
      this.#lastTime = new Date(now).toISOString();
    }
    return this.#lastTime;
  }

  #push(line: string): void {
    // UTF-8 takes at most 3 bytes per UTF-16 unit; a line that may not fit
    // goes after what is queued, in a batch of its own if need be.
    const most = line.length * 3 + 1;
    if (most > BATCH_BYTES - this.#used) {
      this.flush();
      if (most > BATCH_BYTES) {
        this.#hand(this.#encoder.encode(line + "\n"), 1);
        return;
      }
    }
    this.#used += this.#encoder.encodeInto(
      line,
      this.#batch.subarray(this.#used),
    ).written;
    this.#batch[this.#used++] = NEWLINE;
    this.#count++;
    if (this.#timer === undefined) {
      const timer = setTimeout(() => this.flush(), this.#delayMs);
      // A pending flush must not keep a stopping process alive.
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
  }

  /** Hands everything queued to the writer, now. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#count === 0) return;
    // A copy of the used bytes only: a view would keep the whole batch
    // alive per queued write, past what `maxQueuedBytes` counts.
    const bytes = this.#batch.slice(0, this.#used);
    const count = this.#count;
    this.#used = 0;
    this.#count = 0;
    this.#hand(bytes, count);
  }

  /** Queues `count` lines' bytes for the writer, or drops them. */
  #hand(text: Uint8Array, count: number): void {
    if (this.#broken) return;
    if (this.#queued + text.length > this.#maxQueued) {
      this.#dropped += count;
      return;
    }
    if (this.#dropped > 0 && this.#queued === 0) {
      const dropped = this.#encoder.encode(`${
        JSON.stringify({
          time: this.#time(),
          msg: "log_lines_dropped",
          count: this.#dropped,
        })
      }\n`);
      this.#dropped = 0;
      this.#write(dropped);
    }
    this.#write(text);
  }

  #write(bytes: Uint8Array): void {
    this.#queued += bytes.length;
    this.#chain = this.#chain.then(async () => {
      if (this.#broken) return;
      try {
        await writeAll(this.#out, bytes);
      } catch (error) {
        this.#broken = true;
        try {
          console.error(
            `The request log stopped: stdout cannot be written (${
              error instanceof Error ? error.name : "error"
            }); the service goes on without it`,
          );
        } catch {
          // stderr is gone too: nothing left to tell
        }
      } finally {
        this.#queued -= bytes.length;
      }
    });
  }
}
