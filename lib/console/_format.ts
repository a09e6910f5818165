/**
 * For a person at a terminal: times relative to now, colour only where seen.
 *
 * @module
 */

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/** Larger units first; a month and a year are approximate, as in speech. */
const UNITS: [name: string, ms: number][] = [
  ["year", 365 * DAY],
  ["month", 30 * DAY],
  ["day", DAY],
  ["hour", HOUR],
  ["minute", MINUTE],
];

/**
 * An ISO time relative to now ("just now", "3 days ago", "in 2 minutes"), counts
 * rounded down: "1 day ago" is never said of something 23 hours old.
 */
export function relativeTime(
  iso: string,
  options: { now?: number } = {},
): string {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const delta = (options.now ?? Date.now()) - at;
  const size = Math.abs(delta);
  for (const [name, ms] of UNITS) {
    if (size >= ms) {
      const count = Math.floor(size / ms);
      const phrase = `${count} ${name}${count === 1 ? "" : "s"}`;
      return delta >= 0 ? `${phrase} ago` : `in ${phrase}`;
    }
  }
  return "just now";
}

/**
 * The widest {@linkcode relativeTime} within 9999 years ("59 minutes ago"):
 * a column's width, which no realistic time overflows.
 */
export const RELATIVE_TIME_WIDTH = Math.max(
  ...UNITS.map(([name, ms], i) => {
    // The largest count of each unit before the next larger one takes over.
    const count = i === 0 ? 9999 : Math.floor(UNITS[i - 1][1] / ms);
    return `${count} ${name}s ago`.length;
  }),
);

export type Tone = "bold" | "dim" | "red" | "yellow";

const SGR: Record<Tone, [on: number, off: number]> = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  yellow: [33, 39],
};

/** Wraps text in the ANSI codes of a tone; empty text stays empty. */
export function paint(text: string, tone: Tone): string {
  if (text === "") return text;
  const [on, off] = SGR[tone];
  return `\x1b[${on}m${text}\x1b[${off}m`;
}

/** Removes ANSI colour codes, to measure or compare what a person sees. */
export function stripAnsi(text: string): string {
  // deno-lint-ignore no-control-regex
  return text.replace(/\x1b\[[0-9;]*m/g, "");
}
