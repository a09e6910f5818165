/**
 * The admin console, run as `deno task keys`: a thin shell over the same
 * {@linkcode KeyStore} the server reads. The commands are in `lib/console/`,
 * one file each, listed in `lib/console/commands.ts`.
 *
 * Exit codes: 0 done, 1 the command failed (unknown key, name taken, store
 * unavailable, a confirmation answered no), 2 the command line was wrong,
 * 3 a change was made but Ctrl-C ended the wait for servers to confirm it,
 * or `status` found no live server.
 * With `--json`, stdout carries exactly one JSON value, a failure's too
 * (`{"error":{"code","message"}}`, the code from lib/console/errors.ts);
 * every message goes to stderr.
 *
 * At a terminal, `revoke` and `rotate` ask before they change anything, and
 * listings are coloured and fitted to the terminal's width; from a script
 * (stdin or stdout not a terminal) they neither ask nor colour.
 *
 * @module
 */

import {
  envFileNames,
  processEnv,
  readStoreLocation,
  type StoreLocation,
} from "./lib/server/config.ts";
import {
  acknowledged,
  WaitInterruptedError,
} from "./lib/store/acknowledged.ts";
import { openStore } from "./lib/store/open.ts";
import { describeStore } from "./lib/store/location.ts";
import type { KeyService } from "./lib/store/keys.ts";
import type { KeyStore } from "./lib/store/types.ts";
import { COMMANDS } from "./lib/console/commands.ts";
import { commandContext, retireDue } from "./lib/console/_context.ts";
import { errorCode, exitCodeOf, failure } from "./lib/console/errors.ts";
import { jsonText, Output, report } from "./lib/console/_output.ts";
import { parse } from "./lib/console/_parse.ts";
import {
  describeServer,
  INTERRUPTED_WAIT_EXIT,
  interruptedWaitMessage,
} from "./lib/console/_interrupted.ts";
import {
  CONSOLE_VARIABLES,
  consoleGrants,
  requireGrants,
  variableGrants,
} from "./lib/server/permissions.ts";

/**
 * Commands that take the store as it is: a backup holds lifetimes as they
 * stand, and status only reads (a retirement's wait would remove the lapsed
 * registrations it shows).
 */
const NO_RETIRING = new Set(["export", "import", "status"]);

/** Options of {@linkcode main}. */
export interface MainOptions {
  /**
   * Opens the store the configuration names; {@linkcode openStore} unless
   * set, e.g. by a test that needs shorter time limits than the defaults.
   */
  open?: (location: StoreLocation) => Promise<KeyService>;
}

/** Runs the console with the given arguments; returns the exit code. */
export async function main(
  args: string[],
  options: MainOptions = {},
): Promise<number> {
  let store: KeyStore | undefined;
  const out = new Output();
  // Ctrl-C once a change is made only ends the wait for servers, so that
  // the console can say what the store holds (the default would exit 130,
  // silent); before and after, it interrupts as usual.
  const interrupt = new AbortController();
  const stopWaiting = () => interrupt.abort();
  let listening = false;
  const listen = (on: boolean) => {
    if (on === listening) return;
    listening = on;
    if (on) Deno.addSignalListener("SIGINT", stopWaiting);
    else Deno.removeSignalListener("SIGINT", stopWaiting);
  };
  // Known before parsing, so that even a command line that does not parse
  // gets its failure as JSON.
  const json = wantsJson(args);
  try {
    const parsed = parse(args, COMMANDS);
    if ("help" in parsed) {
      out.line(json ? jsonText({ help: parsed.help }) : parsed.help);
      return 0;
    }
    // The keys launcher passes paths to Deno without a shell, spaces included.
    const refusal = { task: "keys", entrypoint: "admin.ts", anyPath: true };
    requireGrants(variableGrants(CONSOLE_VARIABLES), refusal);
    const location = readStoreLocation(processEnv, {
      envFileNames: () => envFileNames(),
    });
    const files = parsed.command.files?.(parsed.positionals);
    requireGrants(consoleGrants(location, files), refusal);
    // Every change waits until each running server has dropped what it
    // replaced, or that server's lease has run out (lib/auth/lease.ts).
    const open = options.open ?? openStore;
    store = acknowledged(await open(location), {
      signal: interrupt.signal,
      onCommitted: () => listen(true),
      onWait: (pending, leaseMs) =>
        report(
          `Waiting up to ${leaseMs / 1000} s for ${
            servers(pending.length)
          } to confirm the change: ${pending.map(describeServer).join(", ")}`,
        ),
      onAcknowledged: (done) => {
        listen(false);
        // Named, so that whoever finds the registration gone knows why.
        for (const server of done.lapsed.filter((one) => one.broken)) {
          report(
            `Removed a broken server registration ${
              JSON.stringify(server.id)
            }: its fields could not be read, so every change would have waited for it; a server behind it registers afresh`,
          );
        }
        // One line per way a server owing the change ended, same shape.
        const lapsedLine = (
          lapsed: typeof done.lapsed,
          what: (lease: string) => string,
        ) => {
          if (lapsed.length === 0) return;
          report(
            `${servers(lapsed.length)} ${
              what(lapsed.length === 1 ? "its lease" : "their leases")
            } (${
              lapsed.map(describeServer).join(", ")
            }); each reads the store again before it answers a request`,
          );
        };
        lapsedLine(
          done.lapsed.filter((server) => server.gone),
          (lease) => `stopped, or lost ${lease}, before confirming`,
        );
        lapsedLine(
          done.lapsed.filter((server) => !server.broken && !server.gone),
          (lease) => `did not confirm before ${lease} ran out`,
        );
      },
    });
    if (!NO_RETIRING.has(parsed.name)) await retireDue(store);
    const code = await parsed.command.run(
      commandContext(store, parsed, { out, where: describeStore(location) }),
    );
    return code ?? 0;
  } catch (error) {
    // What a failed command queued is incomplete: only its message goes out.
    out.discard();
    const message = error instanceof WaitInterruptedError
      ? interruptedWaitMessage(error)
      : failure(error);
    report(message);
    // A key already written (create, or a rotation's value begun) is the
    // one value stdout carries: nothing may follow it.
    if (json && !out.delivered) {
      out.line(jsonText({ error: { code: errorCode(error), message } }));
    }
    return error instanceof WaitInterruptedError
      ? INTERRUPTED_WAIT_EXIT
      : exitCodeOf(error);
  } finally {
    listen(false);
    out.flush();
    await store?.close();
  }
}

/** Whether the command line asks for JSON: `--json` before any `--`. */
function wantsJson(args: string[]): boolean {
  const ending = args.indexOf("--");
  return (ending === -1 ? args : args.slice(0, ending)).includes("--json");
}

function servers(count: number): string {
  return count === 1 ? "1 server" : `${count} servers`;
}

/**
 * Ends the console when whoever started it is gone: `deno task keys` runs
 * it under a small launcher, and a launcher killed outright (SIGKILL, which
 * it cannot pass on) must not leave an import or a prompt running unseen.
 */
function exitWithParent(): void {
  const parent = Deno.ppid;
  const timer = setInterval(() => {
    if (Deno.ppid !== parent) Deno.exit(1);
  }, 50);
  Deno.unrefTimer(timer);
}

if (import.meta.main) {
  exitWithParent();
  Deno.exit(await main(Deno.args));
}
