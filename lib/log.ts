/**
 * JSON lines on stdout, buffered: one `writeSync` per batch instead of one
 * per request, so that logging every request stays on under load.
 *
 * @module
 */

import { writeAllSync } from "./_write_all.ts";

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

/** Writes one JSON object per line to stdout. */
export class JsonLog {
  #lines: string[] = [];
  #lastMs = 0;
  #lastTime = "";
  #size = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #encoder = new TextEncoder();
  #delayMs: number;

  /** Lines wait at most `delayMs` (default 20 ms) before they are written. */
  constructor(options: { delayMs?: number } = {}) {
    this.#delayMs = options.delayMs ?? 20;
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
    this.#lines.push(line);
    this.#size += line.length;
    if (this.#size > 64 * 1024) this.flush();
    else if (this.#timer === undefined) {
      const timer = setTimeout(() => this.flush(), this.#delayMs);
      // A pending flush must not keep a stopping process alive.
      Deno.unrefTimer(timer);
      this.#timer = timer;
    }
  }

  /** Writes everything queued, now. */
  flush(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#lines.length === 0) return;
    const bytes = this.#encoder.encode(this.#lines.join("\n") + "\n");
    this.#lines = [];
    this.#size = 0;
    writeAllSync(Deno.stdout, bytes);
  }
}
