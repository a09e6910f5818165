/**
 * `POST /api/v1/keys/leaked`: anyone who finds a key where it should not be
 * (a repository, a paste, a log) reports it, with no key of their own. The
 * answer is 202 and the same bytes whatever the values were, at the same
 * time after the report, so the route tells nobody which values are keys;
 * every report counts as a failure toward the sender's lock-out, so it is no
 * faster a way to guess keys than the API-key step. What happens to a valid
 * key is lib/auth/leak_reports.ts's.
 *
 * @module
 */

import type { DocumentedRoute, ListSchema } from "../http/contract.ts";
import { readJsonBody } from "../http/json_body.ts";
import { invalidBody, json } from "../http/responses.ts";
import type { ObjectSchema } from "../http/schema.ts";

export const LEAKED_PATH = "/api/v1/keys/leaked";
/** Values in one report. */
export const MAX_VALUES = 100;
/** The body's size: 100 keys take 4 KiB; room for the context a scanner copies along. */
export const MAX_BODY_BYTES = 64 * 1024;
/**
 * How long after the gate a 202 is sent, whatever the values were: time for
 * a valid key's revocation to be acknowledged by every server that answers
 * (tens of milliseconds), so the reporter's next request with it gets 401
 * everywhere, while the answer's timing still tells nothing.
 */
export const LEAK_ANSWER_MS = 500;

/** What the route needs of the server. */
export interface LeakedKeysDependencies {
  /**
   * The lock-out gate (lib/http/authenticate.ts): 429 while the client is
   * locked; else `respond`, and the request counted as a failure.
   */
  refuseFailing(
    context: { client: string; route: string },
    respond: () => Response,
  ): Response;
  /** Takes a report's values, and does nothing with them before the answer is sent. */
  report(values: readonly string[], client: string): void;
  /** {@linkcode LEAK_ANSWER_MS} unless set; 0 answers at once. */
  answerAfterMs?: number;
}

const REPORT_SCHEMA = {
  type: "array",
  description:
    "The values found, each as it was found: a key (`isk_` and 36 letters and digits) or anything that may be one. Values that are not keys are accepted and ignored.",
  items: {
    type: "string",
    examples: ["isk_NotARealKeyJustAnExampleOfTheShape00"],
  },
  maxItems: MAX_VALUES,
} as const satisfies ListSchema;

const ACCEPTED_SCHEMA = {
  type: "object",
  description:
    "The report was received. It says nothing about the values: the answer is the same whether any was a key or none was.",
  required: ["status"],
  properties: { status: { type: "string", const: "accepted" } },
} as const satisfies ObjectSchema;

const ACCEPTED = Object.freeze({ status: "accepted" });

/** What the gate's `respond` returns when it lets a report through; never sent. */
const _PASSED = new Response(null, { status: 204 });

const SHAPE = `Send a JSON list of at most ${MAX_VALUES} strings`;

export function leakedKeysRoute(
  dependencies: LeakedKeysDependencies,
): DocumentedRoute {
  const { refuseFailing, report } = dependencies;
  const answerAfterMs = dependencies.answerAfterMs ?? LEAK_ANSWER_MS;
  return {
    path: LEAKED_PATH,
    auth: "none",
    methods: {
      POST: async ({ request, client }) => {
        // The gate before the body: a locked client gets its 429 at once,
        // not after holding a connection while its body is awaited. It
        // checks and counts in one step, before anything is awaited, so
        // requests sent together cannot all pass a lock unseen.
        let passed = false;
        const refused = refuseFailing({ client, route: LEAKED_PATH }, () => {
          passed = true;
          return _PASSED;
        });
        if (!passed) return refused;
        const body = await readJsonBody(request, { maxBytes: MAX_BODY_BYTES });
        if (!body.ok) return invalidBody(body.message);
        const values = foundValues(body.value);
        if (values === null) return invalidBody(SHAPE);
        report(values, client);
        // The same wait for every report, never one that ends with the
        // work: a wait as long as the work would tell a key by its length.
        if (answerAfterMs > 0) {
          await new Promise((resolve) => setTimeout(resolve, answerAfterMs));
        }
        return json(202, ACCEPTED);
      },
    },
    contract: {
      title: "Leaked key report",
      noun: "the leaked key report",
      name: "LeakedKeys",
      tag: "leaks",
      operations: {
        POST: {
          operationId: "reportLeakedKeys",
          summary: "Report keys found where they should not be",
          description:
            `Needs no key: anyone who finds a value that may be a key of this service (in a repository, a paste, a log) sends it here, up to ${MAX_VALUES} values and ${
              MAX_BODY_BYTES / 1024
            } KiB per request. Each value that is a valid key is marked exposed and, unless the installation chose otherwise, revoked on every server; the administrator sees the report and the sender's address in the audit log, never the value. The answer comes ${LEAK_ANSWER_MS} ms after the report, whatever it held: by then a reported key is refused by every server that answers.\n\nThe answer is 202 with the same body whatever the values were, so it cannot tell anyone which values are keys. Every report counts toward the sender's lock-out like a failed key: after a few reports from one address, the answer is 429 until \`Retry-After\` has passed. Send all the values found in one report.`,
          requestBody: {
            description: `A JSON list of at most ${MAX_VALUES} strings`,
            name: "LeakedKeyReport",
            schema: REPORT_SCHEMA,
            examples: {
              found: {
                summary: "One value found in a public repository",
                value: ["isk_NotARealKeyJustAnExampleOfTheShape00"],
              },
            },
          },
          responses: {
            202: {
              name: "LeakReportAccepted",
              description:
                "The report was received and its values were looked at; a valid key among them is refused from now on by every server that answers. The same answer, at the same time, whatever they were.",
              body: {
                name: "LeakReportAccepted",
                schema: ACCEPTED_SCHEMA,
                examples: { accepted: { value: { status: "accepted" } } },
              },
            },
          },
        },
      },
    },
  };
}

/** The values of a well-formed report; null for anything else. */
function foundValues(value: unknown): string[] | null {
  if (!Array.isArray(value) || value.length > MAX_VALUES) return null;
  return value.every((item) => typeof item === "string") ? value : null;
}
