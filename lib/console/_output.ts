/**
 * Buffered stdout, messages on stderr, and escaping so stored text cannot act on a terminal.
 *
 * @module
 */

import { escapeControlCharacters } from "../util/control_characters.ts";
import { writeAllSync } from "../util/write_all.ts";

/** Buffered stdout, so that a listing of 100 000 keys is not 100 000 writes. */
export class Output {
  #chunks: string[] = [];
  #size = 0;
  #closed = false;
  #delivered = false;

  /**
   * True once {@linkcode deliver} has written: stdout then holds a key, or
   * the start of a rotation's value, that nothing may follow.
   */
  get delivered(): boolean {
    return this.#delivered;
  }

  /**
   * True once the reader of stdout has gone away (`keys list | head`): a
   * listing stops reading the store rather than format rows for nobody.
   */
  get closed(): boolean {
    return this.#closed;
  }

  write(text: string): void {
    this.#chunks.push(text);
    this.#size += text.length;
    if (this.#size > 64 * 1024) this.flush();
  }

  line(text: string): void {
    this.write(text + "\n");
  }

  /**
   * Writes text now, with whatever is pending, and throws when stdout does
   * not take all of it: for a key, whose loss must not pass unnoticed.
   */
  deliver(text: string): void {
    const bytes = this.#take(text);
    if (this.#closed) throw new Deno.errors.BrokenPipe("stdout is closed");
    writeAllSync(Deno.stdout, bytes);
    this.#delivered = true;
  }

  /**
   * Drops what is pending, for a command that failed: half a listing (a
   * header with no rows, a `[` with no `]`) must not reach stdout.
   */
  discard(): void {
    this.#take();
  }

  #take(text = ""): Uint8Array {
    const bytes = new TextEncoder().encode(this.#chunks.join("") + text);
    this.#chunks = [];
    this.#size = 0;
    return bytes;
  }

  /** Writes out what is pending; a reader that went away ends the output quietly. */
  flush(): void {
    const bytes = this.#take();
    if (this.#closed) return;
    try {
      writeAllSync(Deno.stdout, bytes);
    } catch (error) {
      // The reader went away (`keys list | head`): it wants no more, which
      // is no failure of the command.
      if (!(error instanceof Deno.errors.BrokenPipe)) throw error;
      this.#closed = true;
    }
  }
}

/** A stored field as shown: control and bidi characters, newlines too, as `\uXXXX`. */
export function visible(text: string): string {
  return escapeControlCharacters(text);
}

/** JSON for stdout: exact JSON still, with nothing a terminal would act on. */
export function jsonText(value: unknown): string {
  return escapeControlCharacters(JSON.stringify(value));
}

/**
 * A message on stderr. Every line passes the same filter as stored fields,
 * so that a name quoted by a store error cannot steer the terminal either.
 */
export function report(text: string): void {
  console.error(safeLines(text));
}

/** Text of several lines with each line escaped, its newlines kept. */
export function safeLines(text: string): string {
  return text.split("\n").map(escapeControlCharacters).join("\n");
}
