/**
 * The connection check of spec section 4.1: reachable, key valid, and the
 * server's clock, in one authenticated call.
 *
 * @module
 */

import type { DocumentedRoute } from "../http/contract.ts";
import { json } from "../http/responses.ts";
import {
  type FromSchema,
  type ObjectSchema,
  UTC_MILLISECONDS,
} from "../http/schema.ts";

export const CONNECTION_PATH = "/api/v1/integration/connection";

/** Spec section 2.1, written once: built here, published, and read by lib/check/judge.ts. */
export const CONNECTION_STATUS_SCHEMA = {
  type: "object",
  description:
    "The outcome of a successful connection check. Fields may be added in later versions of the API: ignore the ones you do not know.",
  required: [
    "connected",
    "authenticatedByApiKey",
    "apiKeyId",
    "email",
    "serverUtc",
  ],
  properties: {
    connected: {
      type: "boolean",
      const: true,
      description: "The server was reached and processed the request",
    },
    authenticatedByApiKey: {
      type: "boolean",
      const: true,
      description:
        "The request was authenticated by the API key in `X-API-Key`",
    },
    apiKeyId: {
      type: "integer",
      format: "int64",
      minimum: 1,
      maximum: Number.MAX_SAFE_INTEGER,
      description:
        "Numeric id of the key that authenticated the request. Tells apart installations that share one server; quote it to the administrator when asking for a revocation.",
    },
    email: {
      type: "string",
      format: "email",
      maxLength: 254,
      description: "E-mail address of the integrator the key belongs to",
    },
    serverUtc: {
      type: "string",
      format: "date-time",
      pattern: UTC_MILLISECONDS,
      description:
        "The server's clock in UTC, ISO 8601 with milliseconds, always ending in `Z`. Subtract your own clock at the midpoint of the request to get the offset.",
    },
    apiKeyExpiresAt: {
      type: "string",
      format: "date-time",
      pattern: UTC_MILLISECONDS,
      description:
        "Present only when the key has an end: when it stops working, in UTC. A key created with a lifetime ends then; an old key kept working during a rotation's overlap ends at the overlap's deadline (or earlier, at the new key's first use, when the rotation says so). Get a replacement from the administrator before then; after it the key gets 401.",
    },
  },
} as const satisfies ObjectSchema;

export type ConnectionStatus = FromSchema<typeof CONNECTION_STATUS_SCHEMA>;

export function connectionRoute(
  options: { now?: () => Date } = {},
): DocumentedRoute {
  const now = options.now ?? (() => new Date());
  return {
    path: CONNECTION_PATH,
    auth: "api_key",
    methods: {
      GET: ({ key }) => {
        const status: ConnectionStatus = {
          connected: true,
          authenticatedByApiKey: true,
          apiKeyId: key.id,
          email: key.email,
          serverUtc: now().toISOString(),
        };
        if (key.expiresAt !== null) status.apiKeyExpiresAt = key.expiresAt;
        return json(200, status);
      },
    },
    contract: {
      title: "Connection check",
      noun: "the connection check",
      name: "Connection",
      tag: "integration",
      operations: {
        GET: {
          operationId: "checkConnection",
          summary: "Check the URL, the key and the clock in one call",
          description:
            "Call it when setting up an installation and from your monitoring. A 200 proves that the base URL reaches the service and that the key is valid.\n\nCompare `serverUtc` with your own clock: take the local time halfway between sending the request and receiving the answer, so that half the round trip is accounted for. Read `apiKeyId` to confirm which key was used when several installations share one server.\n\nA ready-made client is in the repository: `deno task check` (exit codes 0 OK, 1 clock offset warning, 2 critical, 3 configuration problem).",
          responses: {
            200: {
              name: "Connected",
              description: "The key is valid and the request was processed",
              body: {
                name: "ConnectionStatus",
                schema: CONNECTION_STATUS_SCHEMA,
                examples: {
                  connected: {
                    summary: "Key 3 answered",
                    value: {
                      connected: true,
                      authenticatedByApiKey: true,
                      apiKeyId: 3,
                      email: "ops@example.com",
                      serverUtc: "2026-01-15T09:30:00.123Z",
                    } satisfies ConnectionStatus,
                  },
                },
              },
            },
          },
        },
      },
    },
  };
}
