/**
 * JSON lines on stdout, one write per batch, so logging every request stays
 * on under load. A reader that stalls must not stall the server, nor one
 * that goes away stop it: past `maxQueuedBytes` lines are dropped and
 * counted; after a failed write, logging stops with one line on stderr.
 *
 * @module
 */

import { writeAll } from "../util/write_all.ts";

/** Never a key, header value or query string. */
export interface RequestLogLine {
  requestId: string;
  method: string;
  path: string;
  status: number;
  durationMs: number;
  client: string;
  apiKeyId?: number;
  /** On a 401 without `X-API-Key`: which other header held a key, never its value. */
  hint?: string;
}

const BATCH_BYTES = 64 * 1024;
const NEWLINE = 0x0a;

/**
 * Lines are encoded as queued: strings kept for a 20 ms batch reached the old
 * generation, costing about 17 MB and 3 µs a request under load.
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

  get dropped(): number {
    return this.#dropped;
  }

  settled(): Promise<void> {
    return this.#chain;
  }

  write(fields: Record<string, unknown>): void {
    this.#push(JSON.stringify({ time: this.#time(), ...fields }));
  }

  /** By hand, a third of `JSON.stringify`'s cost; client strings are still escaped by it. */
  request(line: RequestLogLine): void {
    const key = line.apiKeyId === undefined
      ? ""
      : `,"apiKeyId":${line.apiKeyId}`;
    const hint = line.hint === undefined
      ? ""
      : `,"hint":${JSON.stringify(line.hint)}`;
    this.#push(
      `{"time":"${this.#time()}","msg":"request","requestId":"${line.requestId}","method":${
        JSON.stringify(line.method)
      },"path":${
        JSON.stringify(line.path)
      },"status":${line.status},"durationMs":${line.durationMs},"client":${
        JSON.stringify(line.client)
      }${key}${hint}}`,
    );
  }

  /** Formatted once per millisecond. */
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
        } catch { /* stderr is gone too */ }
      } finally {
        this.#queued -= bytes.length;
      }
    });
  }
}
