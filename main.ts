/**
 * The service entrypoint: reads the configuration, opens the store and
 * serves the handler. All behaviour lives in `lib/`.
 *
 * @module
 */

import { ConfigError, processEnv, readConfig } from "./lib/config.ts";
import { createHandler } from "./lib/handler.ts";
import { openStore } from "./lib/store.ts";

/** Starts the server; resolves once it has stopped after SIGTERM or SIGINT. */
export async function serve(): Promise<void> {
  const config = readConfig(processEnv);
  const store = await openStore(config.store);
  const handler = createHandler(store);
  const server = Deno.serve({
    port: config.port,
    hostname: config.hostname,
    onListen: ({ hostname, port }) =>
      log({ msg: "listening", address: `http://${hostname}:${port}` }),
  }, handler);

  const stop = () => {
    log({ msg: "stopping" });
    // shutdown() stops accepting, lets in-flight requests finish, then resolves `finished`.
    server.shutdown();
  };
  Deno.addSignalListener("SIGTERM", stop);
  Deno.addSignalListener("SIGINT", stop);
  await server.finished;
  Deno.removeSignalListener("SIGTERM", stop);
  Deno.removeSignalListener("SIGINT", stop);
  await store.close();
  log({ msg: "stopped" });
}

function log(fields: Record<string, unknown>): void {
  console.log(JSON.stringify({ time: new Date().toISOString(), ...fields }));
}

if (import.meta.main) {
  try {
    await serve();
  } catch (error) {
    console.error(startFailure(error));
    Deno.exit(1);
  }
}

/** One line for the operator: what failed and what to do about it. */
function startFailure(error: unknown): string {
  if (error instanceof ConfigError) return error.message;
  if (error instanceof Deno.errors.NotCapable) {
    return `The start was refused a permission: ${error.message}; ` +
      `the start task may only listen on 0.0.0.0 or 127.0.0.1 and use ./data, so set HOST and DENO_KV_PATH within those or run main.ts with matching --allow flags`;
  }
  if (error instanceof Deno.errors.AddrInUse) {
    return `The address is already in use: ${error.message}; stop the other server or set PORT`;
  }
  return `The server could not start: ${
    error instanceof Error ? error.message : String(error)
  }`;
}
