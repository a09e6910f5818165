/**
 * What an export and an import share: the format's name and version, the files' handling, progress and the summary.
 *
 * @module
 */

import { ConsoleError } from "../errors.ts";

export const EXPORT_FORMAT = "integration-service-keys";
/** The one version an import reads; a later format version reads this one on. */
export const EXPORT_VERSION = 3;

/** What `export` and `import --json` print. */
export interface BackupSummary {
  file: string;
  keys: number;
  audit: number;
  exportedAt: string | null;
}

export function counted(summary: { keys: number; audit: number }): string {
  return `${summary.keys} key${
    summary.keys === 1 ? "" : "s"
  } and ${summary.audit} audit line${summary.audit === 1 ? "" : "s"}`;
}

/** A file operation refused or failed, reworded for the admin. */
export function fileProblem(
  error: unknown,
  file: string,
  verb: string,
): unknown {
  if (error instanceof Deno.errors.NotCapable) {
    return new ConsoleError(
      `This process may not touch ${
        JSON.stringify(file)
      }; run the command through deno task -q keys, which grants access to the FILE it names`,
      { code: "file_refused" },
    );
  }
  if (error instanceof Deno.errors.PermissionDenied) {
    return new ConsoleError(
      `${file} cannot be ${verb} by this user (${error.message}); check the owner and mode of the file and its folder`,
      { code: "file_refused" },
    );
  }
  return error;
}

/** Signals that end a backup or restore, with the exit code a shell gives them. */
const INTERRUPTIONS: [Deno.Signal, number][] = [
  ["SIGINT", 130],
  ["SIGTERM", 143],
  ["SIGHUP", 129],
];

/** Until disposed, a signal calls `stop` with the shell's exit code for it instead of exiting. */
export function onInterruption(stop: (exitCode: number) => void): Disposable {
  const listeners = INTERRUPTIONS.map((
    [signal, code],
  ): [Deno.Signal, () => void] => [signal, () => stop(code)]);
  for (const [signal, listener] of listeners) {
    Deno.addSignalListener(signal, listener);
  }
  return {
    [Symbol.dispose]() {
      for (const [signal, listener] of listeners) {
        Deno.removeSignalListener(signal, listener);
      }
    },
  };
}

/** Prints a line on stderr every few seconds while a long backup or restore runs. */
export class Progress {
  #verb: string;
  #last = Date.now();

  constructor(verb: string) {
    this.#verb = verb;
  }

  tick(counts: { keys: number; audit: number }): void {
    const now = Date.now();
    if (now - this.#last < 2000) return;
    this.#last = now;
    console.error(`${this.#verb} ${counted(counts)} so far…`);
  }
}
