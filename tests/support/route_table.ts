/**
 * The route table (lib/routes/table.ts) as the tests that cover every route
 * read it: head_test, prism_proxy_test and generated_client_test take their
 * paths from here, so a new route is covered by them without a line added.
 *
 * @module
 */

import {
  type DocumentedRoute,
  type Method,
  METHODS,
} from "../../lib/http/contract.ts";
import { documentedRoutes } from "../../lib/routes/table.ts";

/** Every route the service serves, in the table's order. */
export const ROUTES: readonly DocumentedRoute[] = documentedRoutes();

/** The routes behind the API-key step. */
export const KEYED_ROUTES: readonly DocumentedRoute[] = ROUTES.filter((
  route,
) => route.auth === "api_key");

/** The routes that need no key. */
export const OPEN_ROUTES: readonly DocumentedRoute[] = ROUTES.filter((
  route,
) => route.auth === "none");

/** The methods of POST, PUT, PATCH and DELETE the route answers with 405. */
export function refusedMethods(route: DocumentedRoute): Method[] {
  return METHODS.filter((method) => route.methods[method] === undefined);
}

/** The `Allow` header the route's 405 and OPTIONS answers carry, in the table's order. */
export function allowOf(route: DocumentedRoute): string {
  return [
    ...Object.keys(route.methods),
    ...(route.methods.GET === undefined ? [] : ["HEAD"]),
    "OPTIONS",
  ].join(", ");
}
