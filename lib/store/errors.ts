/**
 * The errors a store throws, each with a stable `code` and the fields a caller
 * needs to act on or word it (ids, names, the field at fault): tell them apart
 * by class or code, never by message. Messages state the fact for logs; the
 * admin's wording and fix are the console's (`lib/console/store_errors.ts`).
 * @module
 */

/** The admin-supplied field an input error is about. */
export type InputField =
  | "name"
  | "email"
  | "reason"
  | "allowFrom"
  | "rateLimit";

/** Every code of {@linkcode StoreInputError} and its subclasses. */
export type StoreInputCode =
  | "key_not_found"
  | "name_taken"
  | "rotate_revoked"
  | "rotate_retiring"
  | "key_collision"
  | "key_ids_exhausted"
  | "invalid_name"
  | "invalid_email"
  | "invalid_reason"
  | "invalid_allowFrom"
  | "invalid_rateLimit"
  | "import_unfinished"
  | "import_aborted"
  | "import_not_empty"
  | "import_raced"
  | "import_bad_key"
  | "import_bad_audit"
  | "import_unknown_item"
  | "store_kind_unsupported"
  | "endpoint_not_found"
  | "endpoints_full";

/** Every code of {@linkcode StoreUnavailableError}. */
export type StoreUnavailableCode =
  /** The database cannot be reached, read or used. */
  | "store_unavailable"
  /** Other writers kept the store locked through every retry. */
  | "store_busy"
  /** Too many request-path reads already wait on an unanswering store. */
  | "store_overloaded"
  /** A change got no answer in time: it may or may not have been made. */
  | "change_unconfirmed"
  /** A change took too long and was cancelled: it was not made. */
  | "change_cancelled";

/** A request the store refuses: the caller asked for something it cannot do. */
export class StoreInputError extends Error {
  override name = "StoreInputError";

  constructor(readonly code: StoreInputCode, message: string) {
    super(message);
  }
}

/** No key has the id or name asked for; exactly one of `id` and `name` is set. */
export class KeyNotFoundError extends StoreInputError {
  override name = "KeyNotFoundError";
  readonly id: number | undefined;
  readonly keyName: string | undefined;

  constructor(ref: number | string) {
    super(
      "key_not_found",
      typeof ref === "number"
        ? `Key ${ref} does not exist`
        : `No valid key is named ${JSON.stringify(ref)}`,
    );
    this.id = typeof ref === "number" ? ref : undefined;
    this.keyName = typeof ref === "string" ? ref : undefined;
  }
}

/** The name asked for is held by the valid key `id`. */
export class NameTakenError extends StoreInputError {
  override name = "NameTakenError";

  constructor(readonly keyName: string, readonly id: number) {
    super(
      "name_taken",
      `Name ${JSON.stringify(keyName)} is already used by valid key ${id}`,
    );
  }
}

/** Key `id` is revoked, and a revoked key cannot be rotated. */
export class RotateRevokedError extends StoreInputError {
  override name = "RotateRevokedError";

  constructor(readonly id: number) {
    super("rotate_revoked", `Key ${id} is revoked and cannot be rotated`);
  }
}

/** The key is in a rotation's overlap already: its replacement is the one to rotate. */
export class RotateRetiringError extends StoreInputError {
  override name = "RotateRetiringError";

  constructor(readonly id: number, readonly replacedBy: number) {
    super(
      "rotate_retiring",
      `Key ${id} is retiring, replaced by key ${replacedBy}`,
    );
  }
}

/** A generated key's hash is already stored (practically never). */
export class KeyCollisionError extends StoreInputError {
  override name = "KeyCollisionError";

  constructor() {
    super("key_collision", "Generated key collides with a stored key");
  }
}

/** The store has handed out every id up to `limit`. */
export class KeyIdsExhaustedError extends StoreInputError {
  override name = "KeyIdsExhaustedError";

  constructor(readonly limit: number) {
    super(
      "key_ids_exhausted",
      `Key ids have reached ${limit}, the highest there is`,
    );
  }
}

/**
 * `endpoint_not_found`: no webhook endpoint has id `value`.
 * `endpoints_full`: `value` endpoints are the most there may be.
 */
export class WebhookEndpointError extends StoreInputError {
  override name = "WebhookEndpointError";

  constructor(
    code: "endpoint_not_found" | "endpoints_full",
    readonly value: number,
  ) {
    super(
      code,
      code === "endpoint_not_found"
        ? `No webhook endpoint has id ${value}`
        : `The store holds ${value} webhook endpoints, the most there may be`,
    );
  }
}

/** What is wrong with a field the admin supplied. */
export type FieldProblem =
  | "empty"
  /** Longer than `limit` characters. */
  | "too_long"
  | "control_characters"
  | "control_or_bidi_characters"
  /** Characters that show as nothing or as a space (U+200B, U+00A0…). */
  | "invisible_characters"
  /** A name of digits only, which would read as a key id. */
  | "all_digits"
  /** Not an e-mail address of at most `limit` characters. */
  | "not_an_address"
  /** Not an address or CIDR range, or one with host bits set (`value`). */
  | "not_a_range"
  /** A rate limit whose count or window is not whole or out of range. */
  | "out_of_range";

/** An admin-supplied name, e-mail or reason the store's rules refuse. */
export class InvalidFieldError extends StoreInputError {
  override name = "InvalidFieldError";
  readonly field: InputField;
  readonly problem: FieldProblem;
  /** The bound the value broke, for `too_long` and `not_an_address`. */
  readonly limit: number | undefined;
  /** The refused value, cut short, for `not_an_address`; raw, so escape it to show it. */
  readonly value: string | undefined;

  constructor(
    field: InputField,
    problem: FieldProblem,
    details: { limit?: number; value?: string } = {},
  ) {
    super(`invalid_${field}`, `Invalid ${field}: ${problem}`);
    this.field = field;
    this.problem = problem;
    this.limit = details.limit;
    this.value = details.value;
  }
}

/**
 * `import_unfinished`: another import runs or one was interrupted, and every
 * change is refused until it ends. `import_aborted`: `abortImport()` ended
 * the import this call was running.
 */
export class ImportStateError extends StoreInputError {
  override name = "ImportStateError";
  declare readonly code: "import_unfinished" | "import_aborted";

  constructor(code: "import_unfinished" | "import_aborted") {
    super(
      code,
      code === "import_unfinished"
        ? "An import into this store is running or was interrupted"
        : "The import was aborted and nothing of it remains",
    );
  }
}

/** What is wrong with one imported key record. */
export type ImportDefect =
  | "not_a_record"
  /** `recordField` is absent: an export writes every field of a record. */
  | "field_missing"
  /** The id is not a whole number from 1 to `limit`. */
  | "id_out_of_range"
  | "id_repeated"
  | "hash_malformed"
  | "hash_repeated"
  | "status_unknown"
  | "name_missing"
  | "email_missing"
  /** A field the store's rules refuse: see `invalid`. */
  | "field_invalid"
  /** Another valid key of the import has the name. */
  | "name_repeated"
  /** A revoked key's name longer than `limit` characters. */
  | "name_too_long"
  /** A hint that is not text of at most `limit` characters. */
  | "hint_malformed"
  /** `recordField` is not an ISO time. */
  | "time_malformed"
  /** `recordField` is longer than `limit` characters. */
  | "text_too_long"
  /** `recordField` (allowFrom, rateLimit, networks, refusedUses) is not as an export writes it. */
  | "usage_malformed"
  /** `recordField` (a rotation link or rateCounter) links keys as no rotation does. */
  | "link_invalid";

/** An imported key record is refused. */
export class ImportKeyError extends StoreInputError {
  override name = "ImportKeyError";
  /** The record's id as the import gave it, which may be anything. */
  readonly keyId: unknown;
  readonly defect: ImportDefect;
  /** The record's field at fault, for the defects about one field. */
  readonly recordField: string | undefined;
  /** The bound broken, for the defects that have one. */
  readonly limit: number | undefined;
  /** The store's refusal of the field, for `field_invalid`. */
  readonly invalid: InvalidFieldError | undefined;

  constructor(
    keyId: unknown,
    defect: ImportDefect,
    details: {
      recordField?: string;
      limit?: number;
      invalid?: InvalidFieldError;
    } = {},
  ) {
    super(
      "import_bad_key",
      `The import's key ${JSON.stringify(keyId)} is refused: ${defect}${
        details.recordField ? ` (${details.recordField})` : ""
      }`,
    );
    this.keyId = keyId;
    this.defect = defect;
    this.recordField = details.recordField;
    this.limit = details.limit;
    this.invalid = details.invalid;
  }
}

/** An imported audit line is malformed; `excerpt` is its JSON, cut short. */
export class ImportAuditError extends StoreInputError {
  override name = "ImportAuditError";

  constructor(readonly excerpt: string) {
    super(
      "import_bad_audit",
      `The import holds a malformed audit line ${excerpt}`,
    );
  }
}

/** An import item is neither a key nor an audit line. */
export class ImportItemError extends StoreInputError {
  override name = "ImportItemError";

  constructor(readonly itemType: unknown) {
    super(
      "import_unknown_item",
      `The import holds an item of unknown type ${JSON.stringify(itemType)}`,
    );
  }
}

/**
 * The store could not be reached or read: retry later, never drop the key. A
 * `store_unavailable` message says what failed and how the operator brings
 * the database back, for the server's log and the console alike.
 */
export class StoreUnavailableError extends Error {
  override name = "StoreUnavailableError";
  readonly code: StoreUnavailableCode;
  /** For `change_unconfirmed` and `change_cancelled`: how long the change went unanswered. */
  readonly timeoutMs: number | undefined;

  constructor(
    code: StoreUnavailableCode,
    message: string,
    options: { cause?: unknown; timeoutMs?: number } = {},
  ) {
    super(message, cause(options));
    this.code = code;
    this.timeoutMs = options.timeoutMs;
  }
}

export type StoreOpenCode = "schema_too_new" | "schema_unknown";

/**
 * A store that cannot open until its operator acts (a newer schema, foreign
 * tables); the message names the fix.
 */
export class StoreOpenError extends Error {
  override name = "StoreOpenError";
  readonly code: StoreOpenCode;

  constructor(
    code: StoreOpenCode,
    message: string,
    options: { cause?: unknown } = {},
  ) {
    super(message, cause(options));
    this.code = code;
  }
}

/** An error's options: no `cause` at all, rather than an undefined one. */
function cause(options: { cause?: unknown }): ErrorOptions | undefined {
  return options.cause === undefined ? undefined : { cause: options.cause };
}
