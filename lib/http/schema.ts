/**
 * Response bodies as JSON Schema, once: for `openapi.json`, the route's type
 * ({@linkcode FromSchema}) and the check ({@linkcode firstBreach}). Only the
 * keywords below, so each means the same here, to Ajv and to integrators' tools.
 *
 * @module
 */

/** As `toISOString` writes it: the `pattern` of every time this API sends. */
export const UTC_MILLISECONDS =
  "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z$";

/** JSON Schema 2020-12, limited to what this API needs. */
export type Schema =
  | ObjectSchema
  | {
    readonly type: "string";
    readonly description?: string;
    readonly const?: string;
    /** `date-time` here is always UTC; the pattern says how it is written. */
    readonly format?: "email" | "date-time";
    readonly pattern?: string;
    readonly maxLength?: number;
    readonly examples?: readonly string[];
  }
  | {
    readonly type: "integer";
    readonly description?: string;
    readonly format?: "int64";
    readonly minimum?: number;
    readonly maximum?: number;
  }
  | {
    readonly type: "boolean";
    readonly description?: string;
    readonly const?: boolean;
  };

export interface ObjectSchema {
  readonly type: "object";
  readonly description?: string;
  readonly required?: readonly string[];
  readonly properties?: { readonly [name: string]: Schema };
  /** Left unsaid, clients must accept fields added later (the tests close it). */
  readonly additionalProperties?: boolean;
}

/** The type a schema declared `as const` allows: the compiler holds a route's body to it. */
export type FromSchema<S> = S extends { readonly const: infer C } ? C
  : S extends { readonly type: "string" } ? string
  : S extends { readonly type: "integer" } ? number
  : S extends { readonly type: "boolean" } ? boolean
  : S extends { readonly type: "object"; readonly properties: infer P }
    ? ObjectOf<
      P,
      S extends { readonly required: readonly (infer R)[] } ? R : never
    >
  : S extends { readonly type: "object" } ? Record<string, unknown>
  : never;

type ObjectOf<P, R> = Flat<
  & { -readonly [K in keyof P & R]: FromSchema<P[K]> }
  & { -readonly [K in Exclude<keyof P, R>]?: FromSchema<P[K]> }
>;

type Flat<T> = { [K in keyof T]: T[K] };

/**
 * The first property that breaks `schema`, as `NAME is not WHAT`; null when
 * all hold. Unlisted properties are ignored, as a client ignores fields added later.
 */
export function firstBreach(
  schema: ObjectSchema,
  value: Record<string, unknown>,
): string | null {
  const required = new Set(schema.required ?? []);
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    if (value[name] === undefined && !required.has(name)) continue;
    if (!holds(property, value[name])) {
      return `${name} is not ${expected(property)}`;
    }
  }
  return null;
}

function holds(schema: Schema, value: unknown): boolean {
  switch (schema.type) {
    case "object":
      return typeof value === "object" && value !== null &&
        !Array.isArray(value) &&
        firstBreach(schema, value as Record<string, unknown>) === null;
    case "boolean":
      return typeof value === "boolean" &&
        (schema.const === undefined || value === schema.const);
    case "integer":
      return Number.isSafeInteger(value) &&
        (schema.minimum === undefined || (value as number) >= schema.minimum) &&
        (schema.maximum === undefined || (value as number) <= schema.maximum);
    case "string":
      return typeof value === "string" &&
        (schema.const === undefined || value === schema.const) &&
        (schema.maxLength === undefined ||
          [...value].length <= schema.maxLength) &&
        (schema.pattern === undefined ||
          new RegExp(schema.pattern, "u").test(value)) &&
        (schema.format === undefined || FORMATS[schema.format].test(value));
  }
}

function expected(schema: Schema): string {
  if ("const" in schema && schema.const !== undefined) {
    return JSON.stringify(schema.const);
  }
  switch (schema.type) {
    case "object":
      return "an object";
    case "boolean":
      return "true or false";
    case "integer":
      return schema.minimum === undefined
        ? "a whole number"
        : `a whole number of at least ${schema.minimum}`;
    case "string":
      if (schema.format !== undefined) return FORMATS[schema.format].phrase;
      return schema.pattern === undefined
        ? "a string"
        : `a string matching ${schema.pattern}`;
  }
}

// Read as a client reads: an address is anything with one @ and no space or
// control character around it; a time is ISO 8601 that Date can read.
const FORMATS = {
  email: {
    phrase: "an e-mail address",
    test: (text: string) =>
      // deno-lint-ignore no-control-regex
      /^[^\s@\u0000-\u001f\u007f]+@[^\s@\u0000-\u001f\u007f]+$/.test(text),
  },
  "date-time": {
    phrase: "an ISO 8601 UTC time ending in Z",
    test: (text: string) =>
      /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(
        text,
      ) && Number.isFinite(Date.parse(text)),
  },
} as const;
