/**
 * The one background loop for notes written off the request path (last use,
 * networks used, uses refused): a timer writes what is pending, one write
 * after another; a failed write is logged with its error's code, never dropped
 * silently, but not retried, as a note is a hint, not a record.
 * @module
 */

import { errorCode } from "../util/error_code.ts";

/** Receives one log line as fields. */
export type LogLine = (fields: Record<string, unknown>) => void;

/** Options of a {@linkcode BackgroundRecorder}. */
export interface RecorderOptions {
  /** How often pending notes are written; default 5 s. */
  flushMs?: number;
  /** Receives a line per failed write (and what the recorder logs); stderr unless set. */
  log?: LogLine;
}

/** A recorder of notes, kept in memory and handed over by {@linkcode BackgroundRecorder.take}. */
export abstract class BackgroundRecorder {
  /** Where this recorder's lines go. */
  protected readonly log: LogLine;
  #what: string;
  #timer: ReturnType<typeof setInterval>;
  #flushing: Promise<void> = Promise.resolve();

  /** `what` names the notes in a failure's log line: "last_used", "usage". */
  constructor(what: string, options: RecorderOptions = {}) {
    this.#what = what;
    this.log = options.log ??
      ((fields) => console.error(JSON.stringify(fields)));
    this.#timer = setInterval(() => this.flush(), options.flushMs ?? 5_000);
    Deno.unrefTimer(this.#timer);
  }

  /** Takes what is pending, as the write that stores it; null when nothing is. */
  protected abstract take(): (() => Promise<void>) | null;

  /** Writes what is pending, after any write under way. */
  flush(): Promise<void> {
    const write = this.take();
    if (write === null) return this.#flushing;
    this.#flushing = this.#flushing.then(write).catch((error) =>
      this.log({
        msg: "store_write_failed",
        what: this.#what,
        code: errorCode(error),
      })
    );
    return this.#flushing;
  }

  /** Stops the timer and writes what is pending. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
  }
}
