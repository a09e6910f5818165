/**
 * A time limit on work that may never answer (a store that hangs), shared
 * by the PostgreSQL connection and the wait for acknowledgements.
 *
 * @module
 */

/** The work did not settle in time; it may still be running. */
export class DeadlineError extends Error {
  override name = "DeadlineError";
}

/** Settles like `work`, or rejects with {@linkcode DeadlineError} once `ms` have passed. */
export function bounded<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new DeadlineError(`no answer within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([work, deadline]).finally(() => clearTimeout(timer));
}
