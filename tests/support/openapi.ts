/**
 * Validates real responses against `openapi.json`, so that the document and
 * the handler cannot drift apart unnoticed: tests pass every response they
 * receive through {@linkcode validateResponse}. It lives with the tests
 * because only they use it: nothing under lib/ ships a validator.
 *
 * Schemas are checked by Ajv's JSON Schema 2020-12 validator, the dialect of
 * OpenAPI 3.1; the OpenAPI objects around them (paths, responses, headers,
 * media types) are walked here, since they are not JSON Schema.
 *
 * @module
 */

import {
  Ajv2020,
  type ErrorObject,
  type ValidateFunction,
} from "ajv/dist/2020.js";
import ajvFormats from "ajv-formats";
import bundled from "../../openapi.json" with { type: "json" };

/** An OpenAPI 3.1 document, as parsed JSON. */
export type OpenApiDocument = Record<string, unknown>;

/** The request a response answers. */
export interface RequestLine {
  /** The HTTP method, any case. */
  method: string;
  /** The path, or a whole URL; a query string is ignored. */
  path: string;
}

/** A response as received. */
export interface ReceivedResponse {
  /** The HTTP status code. */
  status: number;
  /** The response headers, any case. */
  headers: Headers | Record<string, string>;
  /** The raw body; `null` or `""` when there is none. */
  body: string | null;
}

/** Options of {@linkcode validateResponse} and {@linkcode responseProblems}. */
export interface ValidateOptions {
  /** The document to validate against; the repository's `openapi.json` by default. */
  document?: OpenApiDocument;
  /**
   * Read as a client does: a body may carry fields its schema does not list.
   * By default the service is held to exactly the listed fields, so that a
   * field it starts sending (a key, say) cannot slip out undocumented.
   */
  tolerant?: boolean;
}

/** A response that `openapi.json` does not allow; `problems` lists every breach. */
export class OpenApiValidationError extends Error {
  /** Always `OpenApiValidationError`. */
  override name = "OpenApiValidationError";
  /** The status of the response that broke the document. */
  readonly status: number;
  /** One line per breach, such as `body/serverUtc must match pattern …`. */
  readonly problems: string[];

  /** Builds the message from the request, the status and the breaches. */
  constructor(
    request: RequestLine,
    failure: { status: number; problems: string[] },
  ) {
    // A test may send a key in a path on purpose: the message never shows it.
    super(
      `The ${failure.status} response to ${request.method.toUpperCase()} ${
        pathOf(request.path)
      } breaks openapi.json: ${
        failure.problems.join("; ")
      }; fix the handler or the document`.replace(
        /isk_[0-9A-Za-z]{36}/g,
        "[key]",
      ),
    );
    this.status = failure.status;
    this.problems = failure.problems;
  }
}

/**
 * Throws {@linkcode OpenApiValidationError} unless the response is one that
 * the document allows for the request: a documented status, every required
 * header with a valid value, the documented content type and a body that
 * matches its schema (or no body where none is documented, and always for
 * HEAD).
 */
export function validateResponse(
  request: RequestLine,
  response: ReceivedResponse,
  options: ValidateOptions = {},
): void {
  const problems = responseProblems(request, response, options);
  if (problems.length > 0) {
    throw new OpenApiValidationError(request, {
      status: response.status,
      problems,
    });
  }
}

/** The breaches {@linkcode validateResponse} would report; empty when there are none. */
export function responseProblems(
  request: RequestLine,
  response: ReceivedResponse,
  options: ValidateOptions = {},
): string[] {
  const compiled = compiledFor(
    options.document ?? bundled,
    options.tolerant ? tolerantDocuments : closedDocuments,
  );
  const method = request.method.toUpperCase();
  const found = findResponse(
    compiled,
    method,
    pathOf(request.path),
    response.status,
  );
  if (typeof found === "string") return [found];
  const headers = new Headers(response.headers);
  return [
    ...headerProblems(compiled, found, headers),
    ...bodyProblems(compiled, found, headers, {
      body: response.body,
      bodyless: method === "HEAD" || response.status === 204 ||
        response.status === 304,
    }),
  ];
}

/** Reads a fetched response into the shape {@linkcode validateResponse} takes. */
export async function readResponse(
  response: Response,
): Promise<ReceivedResponse> {
  return {
    status: response.status,
    headers: response.headers,
    body: await response.text(),
  };
}

// The key under which the document is registered with Ajv; never fetched.
const DOCUMENT_ID = "urn:openapi-validator:document";

// OpenAPI's own schema keywords, outside JSON Schema: documentation only.
const OPENAPI_SCHEMA_KEYWORDS = [
  "discriminator",
  "xml",
  "externalDocs",
  "example",
];

interface Compiled {
  document: OpenApiDocument;
  ajv: Ajv2020;
  validators: Map<string, ValidateFunction>;
}

// One Ajv per document and reading: compiling is the costly part and every
// test reuses it.
const closedDocuments = new WeakMap<OpenApiDocument, Compiled>();
const tolerantDocuments = new WeakMap<OpenApiDocument, Compiled>();

function compiledFor(
  original: OpenApiDocument,
  cache: WeakMap<OpenApiDocument, Compiled>,
): Compiled {
  let compiled = cache.get(original);
  if (compiled === undefined) {
    const document = cache === closedDocuments ? closed(original) : original;
    const ajv = new Ajv2020({ allErrors: true, strict: true });
    // A CommonJS package: its plugin is the `default` export of module.exports.
    ajvFormats.default(ajv);
    ajv.addVocabulary(OPENAPI_SCHEMA_KEYWORDS);
    // Schemas are reached by JSON pointer into the whole document, so its own
    // top-level fields must not trip strict mode when Ajv compiles the root.
    for (const key of Object.keys(document)) {
      if (!ajv.getKeyword(key)) ajv.addKeyword(key);
    }
    ajv.addSchema({ ...document, $id: DOCUMENT_ID });
    compiled = { document, ajv, validators: new Map() };
    cache.set(original, compiled);
  }
  return compiled;
}

/**
 * The document with every component schema that lists properties and leaves
 * `additionalProperties` unsaid closed to others. The published document
 * stays open, as clients must ignore added fields; a schema that states
 * `additionalProperties` (this document's own, say) keeps what it states.
 */
function closed(document: OpenApiDocument): OpenApiDocument {
  const copy = structuredClone(document);
  const components = copy.components;
  const schemas = isObject(components) ? components.schemas : undefined;
  for (const schema of Object.values(isObject(schemas) ? schemas : {})) {
    if (
      isObject(schema) && isObject(schema.properties) &&
      !("additionalProperties" in schema)
    ) {
      schema.additionalProperties = false;
    }
  }
  return copy;
}

/** A JSON value with the pointer it was found at, `$ref`s followed. */
interface Located {
  value: Record<string, unknown>;
  pointer: string[];
}

function resolve(compiled: Compiled, located: Located): Located {
  let current = located;
  for (let hops = 0; typeof current.value.$ref === "string"; hops++) {
    const ref = current.value.$ref;
    if (!ref.startsWith("#/") || hops > 20) {
      throw new Error(
        `The validator follows only local references, not ${ref}; inline the referenced object in openapi.json`,
      );
    }
    const pointer = ref.slice(2).split("/").map((part) =>
      decodeURIComponent(part).replaceAll("~1", "/").replaceAll("~0", "~")
    );
    current = { value: at(compiled.document, pointer), pointer };
  }
  return current;
}

function at(root: unknown, pointer: string[]): Record<string, unknown> {
  let value = root;
  for (const part of pointer) {
    value = isObject(value) ? value[part] : undefined;
  }
  if (!isObject(value)) {
    throw new Error(
      `openapi.json has no object at #/${pointer.join("/")}; fix the reference`,
    );
  }
  return value;
}

function child(located: Located, ...keys: string[]): Located | undefined {
  let value: unknown = located.value;
  for (const key of keys) value = isObject(value) ? value[key] : undefined;
  return isObject(value)
    ? { value, pointer: [...located.pointer, ...keys] }
    : undefined;
}

/** The documented response for the request, or why there is none. */
function findResponse(
  compiled: Compiled,
  method: string,
  path: string,
  status: number,
): Located | string {
  const root: Located = { value: compiled.document, pointer: [] };
  const template = Object.keys(child(root, "paths")?.value ?? {}).find((t) =>
    templateMatches(t, path)
  );
  let responses: Located | undefined;
  let place: string;
  if (template === undefined) {
    const unrouted = child(root, "x-unrouted-responses");
    responses = unrouted && {
      value: {
        404: { $ref: toRef([...unrouted.pointer, "unknownPath"]) },
        400: { $ref: toRef([...unrouted.pointer, "keyInUrl"]) },
        429: { $ref: toRef([...unrouted.pointer, "lockedOut"]) },
        500: { $ref: toRef([...unrouted.pointer, "internalError"]) },
      },
      pointer: unrouted.pointer,
    };
    place = `${method} ${path}, a path openapi.json does not list`;
  } else {
    const item = resolve(compiled, child(root, "paths", template)!);
    const operation = child(item, method.toLowerCase()) ??
      (method === "HEAD" ? child(item, "get") : undefined);
    responses = operation === undefined
      ? responsesOf(child(root, "x-unrouted-responses", "unknownMethod"), 405)
      : child(operation, "responses");
    place = operation === undefined
      ? `${method} ${template}, a method openapi.json does not list there`
      : `${method} ${template}`;
  }
  if (responses === undefined) {
    return `openapi.json documents no response for ${place}; add it under x-unrouted-responses or paths`;
  }
  const keys = Object.keys(responses.value);
  const key = [String(status), `${String(status)[0]}XX`, "default"].find((k) =>
    keys.includes(k)
  );
  if (key === undefined) {
    return `status ${status} is not documented for ${place} (documented: ${
      keys.join(", ")
    })`;
  }
  return resolve(compiled, child(responses, key)!);
}

/** Wraps an out-of-`paths` response as a `responses` object under its status. */
function responsesOf(
  located: Located | undefined,
  status: number,
): Located | undefined {
  if (located === undefined) return undefined;
  const parent = located.pointer.slice(0, -1);
  const name = located.pointer.at(-1)!;
  // The pointer keeps leading to the real object, so references inside it resolve.
  return {
    value: { [status]: { $ref: toRef([...parent, name]) } },
    pointer: parent,
  };
}

function templateMatches(template: string, path: string): boolean {
  const pattern = template.split(/\{[^}]+\}/).map(escapeRegExp).join("[^/]+");
  return new RegExp(`^${pattern}$`).test(path);
}

function headerProblems(
  compiled: Compiled,
  response: Located,
  headers: Headers,
): string[] {
  const problems: string[] = [];
  const documented = child(response, "headers");
  for (const name of Object.keys(documented?.value ?? {})) {
    // OpenAPI says a Content-Type header object is ignored: content says it.
    if (name.toLowerCase() === "content-type") continue;
    const header = resolve(compiled, child(documented!, name)!);
    const value = headers.get(name);
    if (value === null) {
      if (header.value.required === true) {
        problems.push(`header ${name} is missing`);
      }
      continue;
    }
    const schema = child(header, "schema");
    if (schema === undefined) continue;
    const errors = schemaErrors(
      compiled,
      schema,
      fromHeader(value, schema.value),
    );
    for (const error of errors) {
      problems.push(
        `header ${name} ${JSON.stringify(value)} ${describe(error, "")}`,
      );
    }
  }
  return problems;
}

/** Header values are text; a numeric or boolean schema means the simple-style serialisation. */
function fromHeader(value: string, schema: Record<string, unknown>): unknown {
  const type = schema.type;
  if (
    (type === "integer" || type === "number") && /^-?\d+(\.\d+)?$/.test(value)
  ) {
    return Number(value);
  }
  if (type === "boolean" && (value === "true" || value === "false")) {
    return value === "true";
  }
  return value;
}

function bodyProblems(
  compiled: Compiled,
  response: Located,
  headers: Headers,
  received: { body: string | null; bodyless: boolean },
): string[] {
  const body = received.body ?? "";
  const content = child(response, "content");
  const mediaTypes = Object.keys(content?.value ?? {});
  const contentType = headers.get("content-type");
  if (mediaTypes.length === 0) {
    return body === "" ? [] : [
      `body must be empty, got ${characters(body)}`,
    ];
  }
  if (contentType === null) {
    return received.bodyless && body === "" ? [] : [
      `header Content-Type is missing (documented: ${mediaTypes.join(", ")})`,
    ];
  }
  const essence = contentType.split(";")[0].trim().toLowerCase();
  const mediaType = mediaTypes.find((m) => mediaTypeMatches(m, essence));
  if (mediaType === undefined) {
    return [
      `content type ${essence} is not documented (documented: ${
        mediaTypes.join(", ")
      })`,
    ];
  }
  if (received.bodyless) {
    return body === "" ? [] : [`body must be empty, got ${characters(body)}`];
  }
  const schema = child(content!, mediaType, "schema");
  if (schema === undefined) return [];
  let data: unknown = body;
  if (/[/+]json$/.test(essence)) {
    try {
      data = JSON.parse(body);
    } catch (error) {
      return [`body is not JSON (${(error as Error).message})`];
    }
  }
  return schemaErrors(compiled, schema, data).map((e) => describe(e, "body"));
}

function mediaTypeMatches(documented: string, essence: string): boolean {
  const [type, subtype] = documented.split(";")[0].trim().toLowerCase().split(
    "/",
  );
  const [actualType, actualSubtype] = essence.split("/");
  return (type === "*" || type === actualType) &&
    (subtype === "*" || subtype === actualSubtype);
}

function schemaErrors(
  compiled: Compiled,
  schema: Located,
  data: unknown,
): ErrorObject[] {
  const ref = `${DOCUMENT_ID}${toRef(schema.pointer)}`;
  let validate = compiled.validators.get(ref);
  if (validate === undefined) {
    validate = compiled.ajv.getSchema(ref);
    if (validate === undefined) {
      throw new Error(
        `Ajv cannot find the schema at ${ref}; check openapi.json`,
      );
    }
    compiled.validators.set(ref, validate);
  }
  return validate(data) ? [] : [...(validate.errors ?? [])];
}

/** One readable line per Ajv error, such as `body/serverUtc must match pattern "…"`. */
function describe(error: ErrorObject, subject: string): string {
  const where = subject + error.instancePath;
  const params = error.params as Record<string, unknown>;
  let detail = error.message ?? error.keyword;
  if (error.keyword === "additionalProperties") {
    detail = `must not have the extra property ${
      JSON.stringify(params.additionalProperty)
    }`;
  } else if (error.keyword === "const") {
    detail = `must be ${JSON.stringify(params.allowedValue)}`;
  } else if (error.keyword === "enum") {
    detail = `must be one of ${JSON.stringify(params.allowedValues)}`;
  }
  return where === "" ? detail : `${where} ${detail}`;
}

function toRef(pointer: string[]): string {
  return "#/" +
    pointer.map((part) =>
      encodeURIComponent(part.replaceAll("~", "~0").replaceAll("/", "~1"))
    ).join("/");
}

function pathOf(path: string): string {
  return URL.canParse(path) ? new URL(path).pathname : path.split(/[?#]/)[0];
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function characters(text: string): string {
  return text.length === 1 ? "1 character" : `${text.length} characters`;
}
