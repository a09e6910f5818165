/**
 * When a failed delivery is tried again: after the base delay, doubling each
 * time up to an hour, until a day has passed since the event. At the default
 * 5 s: 5 s, 10 s, 20 s … 43 min (1.4 h in all), then hourly, about 33 tries
 * over 25 hours.
 * @module
 */

/** The longest wait between two tries. */
export const MAX_DELAY_MS = 3_600_000;
/** How long after its event a delivery is still tried. */
export const GIVE_UP_AFTER_MS = 25 * 3_600_000;

/**
 * When try `tries + 1` is due, for a delivery made at `createdMs` that failed
 * at `nowMs`; null when it is given up.
 */
export function nextTry(
  tries: number,
  options: { nowMs: number; createdMs: number; baseMs: number },
): number | null {
  if (options.nowMs - options.createdMs >= GIVE_UP_AFTER_MS) return null;
  const delay = Math.min(
    MAX_DELAY_MS,
    options.baseMs * 2 ** Math.min(Math.max(0, tries - 1), 30),
  );
  return options.nowMs + delay;
}
