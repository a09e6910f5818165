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
import { type LeakedKeysDependencies, leakedKeysRoute } from "./leaked.ts";

export interface RouteDependencies {
  store: Pick<KeyStore, "revision">;
  /** The lock-out gate and the report's work, for the leaked key report. */
  leaks: LeakedKeysDependencies;
  now?: () => Date;
}

/** The routes, in the order `openapi.json` lists them. */
export function routeTable(dependencies: RouteDependencies): DocumentedRoute[] {
  return [
    connectionRoute({ now: dependencies.now }),
    ...healthRoutes(dependencies.store),
    leakedKeysRoute(dependencies.leaks),
  ];
}

/** For the contract and the tests: no store is opened, and a handler called anyway finds none. */
export function documentedRoutes(): DocumentedRoute[] {
  return routeTable({
    store: {
      revision: () =>
        Promise.reject(new Error("documentedRoutes() has no store")),
    },
    leaks: {
      refuseFailing: () => {
        throw new Error("documentedRoutes() has no lock-out");
      },
      report: () => {
        throw new Error("documentedRoutes() takes no report");
      },
    },
  });
}
