/**
 * The route table: every route the service serves, each with its contract.
 * The router serves it (lib/server/handler.ts), `openapi.json` is generated from it
 * (`deno task contract`, lib/http/contract.ts), and the tests that cover
 * every route read their paths from it. A new route is one line here.
 *
 * @module
 */

import type { DocumentedRoute } from "../http/contract.ts";
import type { KeyStore } from "../store/types.ts";
import { connectionRoute } from "./connection.ts";
import { healthRoutes } from "./health.ts";

/** What the routes need to answer. */
export interface RouteDependencies {
  /** Read by the readiness probe. */
  store: Pick<KeyStore, "revision">;
  /** The server clock; tests pin it. */
  now?: () => Date;
}

/** The routes, in the order `openapi.json` lists them. */
export function routeTable(dependencies: RouteDependencies): DocumentedRoute[] {
  return [
    connectionRoute({ now: dependencies.now }),
    ...healthRoutes(dependencies.store),
  ];
}

/**
 * The table as the contract and the tests read it: paths, methods and
 * contracts. Its handlers are never called, so no store is opened; one that
 * is called anyway finds the store unreadable.
 */
export function documentedRoutes(): DocumentedRoute[] {
  return routeTable({
    store: {
      revision: () =>
        Promise.reject(new Error("documentedRoutes() has no store")),
    },
  });
}
