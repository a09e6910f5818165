/**
 * Unauthenticated routes for load balancers and clients: liveness,
 * readiness (the store can be read) and the OpenAPI document.
 *
 * @module
 */

import openapi from "../../openapi.json" with { type: "json" };
import type { Route } from "../http/router.ts";
import { json, jsonText } from "../http/responses.ts";
import type { KeyStore } from "../store/types.ts";

/** Liveness: the process answers. */
export const LIVE_PATH = "/api/v1/health/live";
/** Readiness: the process answers and can read the store. */
export const READY_PATH = "/api/v1/health/ready";
/** The OpenAPI document of this API. */
export const OPENAPI_PATH = "/api/v1/openapi.json";

const OPENAPI_BODY = JSON.stringify(openapi);

/** The three routes; readiness reads the store's revision. */
export function healthRoutes(store: Pick<KeyStore, "revision">): Route[] {
  return [
    {
      path: LIVE_PATH,
      auth: "none",
      methods: { GET: () => json(200, { status: "ok" }) },
    },
    {
      path: READY_PATH,
      auth: "none",
      methods: {
        GET: async () => {
          try {
            await store.revision();
            return json(200, { status: "ok" });
          } catch {
            return json(503, { status: "unavailable" }, { "retry-after": "5" });
          }
        },
      },
    },
    {
      path: OPENAPI_PATH,
      auth: "none",
      methods: { GET: () => jsonText(OPENAPI_BODY) },
    },
  ];
}
