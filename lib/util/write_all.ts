/** Writes all of `text`: `write()` may take only part of the bytes. */
export async function writeAll(
  target: { write(bytes: Uint8Array): Promise<number> },
  text: string | Uint8Array,
): Promise<void> {
  const bytes = typeof text === "string"
    ? new TextEncoder().encode(text)
    : text;
  for (let at = 0; at < bytes.length;) {
    at += await target.write(bytes.subarray(at));
  }
}

/** Writes all of `bytes` to `target` synchronously, for buffered stdout. */
export function writeAllSync(
  target: { writeSync(bytes: Uint8Array): number },
  bytes: Uint8Array,
): void {
  for (let at = 0; at < bytes.length;) {
    at += target.writeSync(bytes.subarray(at));
  }
}
