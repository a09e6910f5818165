/**
 * The connection check of spec section 4.1: reachable, key valid, and the
 * server's clock, in one authenticated call.
 *
 * @module
 */

import type { Route } from "../http/router.ts";
import { json } from "../http/responses.ts";

/** The route's path. */
export const CONNECTION_PATH = "/api/v1/integration/connection";

/** The body of a successful connection check (spec section 2.1). */
export interface ConnectionStatus {
  connected: true;
  authenticatedByApiKey: true;
  apiKeyId: number;
  email: string;
  serverUtc: string;
  /** When the key stops working (its lifetime, or a rotation's deadline); absent when never. */
  apiKeyExpiresAt?: string;
}

/** The route; `now` is the server clock, which tests pin. */
export function connectionRoute(
  options: { now?: () => Date } = {},
): Route {
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
  };
}
