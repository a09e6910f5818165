/**
 * Every route with its contract: served, published as `openapi.json` and
 * read by the tests that cover every route. A new route is one line here.
 *
 * @module
 */

import type { DocumentedRoute } from "../http/contract.ts";
import type { KeyStore } from "../store/types.ts";
import { connectionRoute } from "./connection.ts";
import { healthRoutes } from "./health.ts";

export interface RouteDependencies {
  store: Pick<KeyStore, "revision">;
  now?: () => Date;
}

/** The routes, in the order `openapi.json` lists them. */
export function routeTable(dependencies: RouteDependencies): DocumentedRoute[] {
  return [
    connectionRoute({ now: dependencies.now }),
    ...healthRoutes(dependencies.store),
  ];
}

/** For the contract and the tests: no store is opened, and a handler called anyway finds none. */
export function documentedRoutes(): DocumentedRoute[] {
  return routeTable({
    store: {
      revision: () =>
        Promise.reject(new Error("documentedRoutes() has no store")),
    },
  });
}
