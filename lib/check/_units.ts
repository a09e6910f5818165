/**
 * Numbers as the check prints them, in summaries and details alike.
 *
 * @module
 */

/** Seconds with a sign and three decimals: +0.120, -2.000. */
export function signed(seconds: number): string {
  return (seconds >= 0 ? "+" : "-") + Math.abs(seconds).toFixed(3);
}

/** A threshold as typed, never in exponent notation such as 1e-7. */
export function plain(value: number): string {
  return value.toLocaleString("en-US", {
    maximumFractionDigits: 9,
    useGrouping: false,
  });
}

/** Seconds to the microsecond, the finest measured: 0.045105131000000014 is 0.045105. */
export function microseconds(seconds: number): number {
  return Math.round(seconds * 1e6) / 1e6;
}

/** "1 hour", "2 days": a count and its unit, singular for one. */
export function counted(count: number, unit: string): string {
  return `${count} ${unit}${count === 1 ? "" : "s"}`;
}

/** A duration in milliseconds, one decimal below 10 ms. */
export function milliseconds(seconds: number): string {
  const ms = seconds * 1000;
  return ms < 10 ? `${ms.toFixed(1)} ms` : `${Math.round(ms)} ms`;
}
