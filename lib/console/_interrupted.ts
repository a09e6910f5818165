/**
 * What the console says when Ctrl-C ends its wait: the change is in the store,
 * so it says what that holds and which servers may answer from before, how long.
 *
 * @module
 */

import type { Lapsed, WaitInterruptedError } from "../store/acknowledged.ts";
import type { KeyRecord, RotateResult } from "../store/types.ts";

/** The exit code of a change made whose wait for servers was interrupted. */
export const INTERRUPTED_WAIT_EXIT = 3;

/** The message for an interrupted wait, one line. */
export function interruptedWaitMessage(error: WaitInterruptedError): string {
  const { owing, remainingMs } = error.report;
  const { made, replaced } = committed(error);
  if (owing.length === 0) {
    return `${made}; the wait for servers to confirm it was interrupted before any was read, so every server stops ${replaced} within ${
      seconds(remainingMs)
    }, when its lease runs out`;
  }
  const one = owing.length === 1;
  return `${made}; ${owing.length} ${
    one ? "server" : "servers"
  } had not yet confirmed it: ${owing.map(describeServer).join(", ")}; ${
    one ? "it stops" : "each stops"
  } ${replaced} within ${seconds(remainingMs)}, when ${
    one ? "its" : "its own"
  } lease runs out`;
}

/** A server as the console's wait lines name it. */
export function describeServer(server: Lapsed): string {
  if (server.broken) {
    return `a broken registration ${JSON.stringify(server.id)}`;
  }
  return server.host === ""
    ? `pid ${server.pid}`
    : `pid ${server.pid} on ${server.host}`;
}

/** What the change made, and what a server behind on it still does. */
function committed(
  error: WaitInterruptedError,
): { made: string; replaced: string } {
  // What the store method named by `change` returned.
  const result = error.result as KeyRecord & RotateResult & {
    record: KeyRecord;
  };
  switch (error.change) {
    case "revoke":
    case "retire":
      return {
        made: `Key ${result.record.id} is revoked in the store`,
        replaced: `accepting key ${result.record.id}`,
      };
    case "rotate": {
      const { revoked, created } = result;
      return revoked.status === "revoked"
        ? {
          made:
            `Key ${revoked.id} is revoked and key ${created.id} replaces it in the store`,
          replaced: `accepting key ${revoked.id}`,
        }
        : {
          made: `Key ${created.id} replaces key ${revoked.id} in the store`,
          replaced: `answering with key ${revoked.id}'s old lifetime`,
        };
    }
    case "create":
      return {
        made: `Key ${result.id} is created in the store`,
        replaced: `refusing it`,
      };
    case "setRateLimit":
      return {
        made: `Key ${result.record.id}'s rate limit is changed in the store`,
        replaced: "applying the limit it had before",
      };
    case "setAllowFrom":
      return {
        made: `Key ${result.record.id}'s networks are changed in the store`,
        replaced: "applying the networks it had before",
      };
  }
  return {
    made: "The change is made in the store",
    replaced: "answering from before it",
  };
}

function seconds(ms: number): string {
  return `${Math.max(0.1, Math.ceil(ms / 100) / 10)} s`;
}
