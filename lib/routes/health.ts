/**
 * Unauthenticated routes for load balancers and clients: liveness,
 * readiness (the store can be read) and the OpenAPI document.
 *
 * @module
 */

import openapi from "../../openapi.json" with { type: "json" };
import type { DocumentedRoute } from "../http/contract.ts";
import { json, jsonText, type ResponseContract } from "../http/responses.ts";
import type { KeyStore } from "../store/types.ts";

export const LIVE_PATH = "/api/v1/health/live";
const READY_PATH = "/api/v1/health/ready";
const OPENAPI_PATH = "/api/v1/openapi.json";

const OPENAPI_BODY = JSON.stringify(openapi);

const HEALTH_OK: ResponseContract = {
  name: "HealthOk",
  description: "The probe passed",
  body: {
    name: "HealthOk",
    schema: {
      type: "object",
      required: ["status"],
      properties: { status: { type: "string", const: "ok" } },
    },
    examples: { ok: { value: { status: "ok" } } },
  },
};

export function healthRoutes(
  store: Pick<KeyStore, "revision">,
): DocumentedRoute[] {
  return [
    {
      path: LIVE_PATH,
      auth: "none",
      methods: { GET: () => json(200, { status: "ok" }) },
      contract: {
        title: "Liveness probe",
        noun: "the liveness probe",
        name: "Liveness",
        tag: "health",
        operations: {
          GET: {
            operationId: "getLiveness",
            summary: "Tell whether the process is up",
            description:
              "Needs no key. A 200 says nothing about whether keys can be checked; use the readiness probe or the connection check for that.",
            responses: { 200: HEALTH_OK },
          },
        },
      },
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
      contract: {
        title: "Readiness probe",
        noun: "the readiness probe",
        name: "Readiness",
        tag: "health",
        operations: {
          GET: {
            operationId: "getReadiness",
            summary: "Tell whether the service can check keys",
            description:
              "Needs no key. 503 means the key store cannot be read right now: authenticated calls would answer 503 too, and keys are not in question.",
            responses: {
              200: HEALTH_OK,
              503: {
                name: "HealthUnavailable",
                description:
                  "The probe failed: take the instance out of rotation and look again later",
                headers: ["Retry-After"],
                body: {
                  name: "HealthUnavailable",
                  schema: {
                    type: "object",
                    required: ["status"],
                    properties: {
                      status: { type: "string", const: "unavailable" },
                    },
                  },
                  examples: {
                    unavailable: { value: { status: "unavailable" } },
                  },
                },
              },
            },
          },
        },
      },
    },
    {
      path: OPENAPI_PATH,
      auth: "none",
      methods: { GET: () => jsonText(OPENAPI_BODY) },
      contract: {
        title: "This document",
        noun: "the OpenAPI description",
        name: "OpenApiDocument",
        tag: "meta",
        operations: {
          GET: {
            operationId: "getOpenApiDocument",
            summary: "Fetch this OpenAPI description",
            description:
              "Needs no key. Load it into an API client or a code generator, and set the `baseUrl` server variable to your installation's address.",
            responses: {
              200: {
                name: "OpenApiDocument",
                description: "The OpenAPI 3.1 description of this API",
                body: {
                  name: "OpenApiDocument",
                  schema: {
                    type: "object",
                    description:
                      "An OpenAPI 3.1 document; this one. Only its outline is described: it has many more fields.",
                    required: ["openapi", "info", "paths"],
                    properties: {
                      openapi: { type: "string", pattern: "^3\\.1\\.\\d+$" },
                      info: { type: "object" },
                      paths: { type: "object" },
                    },
                    additionalProperties: true,
                  },
                },
              },
            },
          },
        },
      },
    },
  ];
}
