/**
 * Waiting for what a test needs to have happened, instead of sleeping for a
 * guess at how long it takes: a busy machine only makes the wait longer.
 *
 * @module
 */

/**
 * How long {@linkcode until} waits by default before it gives up: not how
 * long anything should take, only the end of a test whose event never
 * comes, far past any promise of the code (the longest, a change's wait
 * for a lease, is 3 s) even on a machine under a load of 10.
 */
export const GIVE_UP_MS = 60_000;

/**
 * Resolves once `done()` holds, checking every `everyMs` (default 10);
 * rejects naming `what` after `giveUpMs`.
 */
export async function until(
  done: () => boolean | Promise<boolean>,
  what: string,
  options: { giveUpMs?: number; everyMs?: number } = {},
): Promise<void> {
  const giveUpMs = options.giveUpMs ?? GIVE_UP_MS;
  const deadline = performance.now() + giveUpMs;
  while (!(await done())) {
    if (performance.now() > deadline) {
      throw new Error(`Gave up after ${giveUpMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, options.everyMs ?? 10));
  }
}
