/**
 * JSON lines on stdout, buffered: one `writeSync` per batch instead of one
 * per request, so that logging every request stays on under load.
 *
 * @module
 */

/** Writes one JSON object per line to stdout. */
export class JsonLog {
  #lines: string[] = [];
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
    const line = JSON.stringify({ time: new Date().toISOString(), ...fields });
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
    for (let at = 0; at < bytes.length;) {
      at += Deno.stdout.writeSync(bytes.subarray(at));
    }
  }
}
