/**
 * The store's errors as the console words them: one sentence per code, with the fix.
 *
 * @module
 */

import { escapeControlCharacters } from "../util/control_characters.ts";
import { rangeProblem } from "../server/config.ts";
import {
  ImportAuditError,
  type ImportDefect,
  ImportKeyError,
  InvalidFieldError,
  KeyIdsExhaustedError,
  KeyNotFoundError,
  NameTakenError,
  RotateRetiringError,
  RotateRevokedError,
  StoreInputError,
  StoreUnavailableError,
} from "../store/errors.ts";

/** What `keys import` says about each defect of an imported key: "The import's key 2 has …". */
function defectPhrase(error: ImportKeyError): string {
  const { limit, recordField } = error;
  const phrases: Record<ImportDefect, () => string> = {
    not_a_record: () => "no record",
    field_missing: () => `no ${recordField}`,
    id_out_of_range: () =>
      `an id that is not a whole number from 1 to ${limit}`,
    id_repeated: () => "an id another key has",
    hash_malformed: () => "a hash that is not SHA-256 hex",
    hash_repeated: () => "a hash another key has",
    status_unknown: () => "an unknown status",
    name_missing: () => "no name",
    email_missing: () => "no e-mail",
    field_invalid: () =>
      `a bad field (${
        error.invalid ? fieldProblem(error.invalid) : "unknown field"
      })`,
    name_repeated: () => "a name another valid key has",
    name_too_long: () => `a name longer than ${limit} characters`,
    hint_malformed: () =>
      `a hint that is not text of at most ${limit} characters`,
    time_malformed: () => `a bad ${recordField}`,
    text_too_long: () =>
      `${
        /^[aeiou]/.test(recordField ?? "") ? "an" : "a"
      } ${recordField} longer than ${limit} characters`,
    usage_malformed: () => `a bad ${recordField}`,
    link_invalid: () => `a ${recordField} link that no rotation writes`,
  };
  return phrases[error.defect]();
}

/** A refused name, e-mail or reason, as the console words it. */
function fieldProblem(error: InvalidFieldError): string {
  const { field, problem, limit } = error;
  switch (`${field}:${problem}`) {
    case "name:empty":
      return "Name must not be empty; name the installation";
    case "name:too_long":
      return `Name must be at most ${limit} characters; shorten it`;
    case "name:control_characters":
      return "Name must not contain control characters";
    case "name:control_or_bidi_characters":
      return "Name must not contain control or bidirectional characters";
    case "name:invisible_characters":
      return "Name must not contain invisible characters or spaces other than the plain one (such as U+200B or U+00A0), as it would look like another name; retype it";
    case "name:all_digits":
      return "Name must not be all digits, as digits refer to a key id";
    case "email:not_an_address":
      return `Email must be an address such as ops@example.com of at most ${limit} characters, not ${
        // The refused value is shown, but never as the terminal would act on it.
        escapeControlCharacters(JSON.stringify(error.value ?? ""))}`;
    case "reason:empty":
      return "Reason must not be empty; say why, or leave the reason out";
    case "reason:too_long":
      return `Reason must be at most ${limit} characters; shorten it`;
    case "allowFrom:not_a_range":
      return `Allow-from must list addresses or ranges such as 192.0.2.0/24,2001:db8::/48, and ${
        escapeControlCharacters(JSON.stringify(error.value ?? ""))
      } is not one (${
        rangeProblem((error.value ?? "").trim())
      }); fix the range or write "any" to allow every address`;
    case "allowFrom:empty":
      return 'Allow-from must list at least one range; write "any" to allow every address';
    case "allowFrom:too_long":
      return `Allow-from may list at most ${limit} ranges; merge them into wider ranges`;
    case "rateLimit:out_of_range":
      return "Rate limit must be a whole count of 1 to 1000000000 per window of 1 s to 1 day; write it such as 600/min, or none";
    case "reason:control_or_bidi_characters":
      return "Reason must not contain control or bidirectional characters; write it on one line";
  }
  return `${field[0].toUpperCase()}${field.slice(1)} is not usable`;
}

/** The console's sentence for a refused request: by class where it has fields, else by code. */
function inputProblem(error: StoreInputError): string {
  if (error instanceof KeyNotFoundError) {
    return error.id !== undefined
      ? `Key ${error.id} does not exist; run "keys list --all" to see the keys`
      : `No valid key is named ${
        JSON.stringify(error.keyName)
      }; run "keys list" to see the names`;
  }
  if (error instanceof NameTakenError) {
    return `Name ${
      JSON.stringify(error.keyName)
    } is already used by valid key ${error.id}; choose another name or revoke key ${error.id} first`;
  }
  if (error instanceof RotateRevokedError) {
    return `Key ${error.id} is revoked, and a revoked key cannot be rotated; see "keys show ${error.id}", and create the installation a new key with "keys create --name NAME --email EMAIL"`;
  }
  if (error instanceof RotateRetiringError) {
    return `Key ${error.id} is already being replaced by key ${error.replacedBy}; see "keys show ${error.replacedBy}" for the replacement, or stop key ${error.id} now with "keys revoke ${error.id}"`;
  }
  if (error instanceof KeyIdsExhaustedError) {
    return `Key ids have reached ${error.limit}, the highest there is; move the keys to a new store with "keys export" and an edited import`;
  }
  if (error instanceof InvalidFieldError) return fieldProblem(error);
  if (error instanceof ImportKeyError) {
    return `The import's key ${JSON.stringify(error.keyId)} has ${
      defectPhrase(error)
    }; fix or regenerate the export`;
  }
  if (error instanceof ImportAuditError) {
    return `The import holds a malformed audit line ${error.excerpt}; fix or regenerate the export`;
  }
  switch (error.code) {
    case "key_collision":
      return "Generated key collides; run the command again";
    case "import_unfinished":
      return 'An import into this store is running or was interrupted, and no key works until it ends; wait for it, or if none is running, run "keys import --abort" to empty the store and then import again';
    case "import_aborted":
      return 'The import was aborted by "keys import --abort" and nothing of it remains; run the import again';
    case "import_not_empty":
      return "The store is not empty; import only into a new store, so that no key is lost or duplicated";
    case "import_raced":
      return "The store changed while the import began; run it again";
    case "endpoint_not_found":
      return `${error.message}; run "keys webhooks list" to see them`;
    case "endpoints_full":
      return `${error.message}; remove one with "keys webhooks remove ID"`;
    default:
      // store_kind_unsupported: the fact is all there is to say.
      return error.message;
  }
}

/**
 * A store error worded: a refused request gets its sentence and fix; an outage
 * keeps the store's message (for whoever runs the database), except an
 * unconfirmed change, which names the commands that tell.
 */
export function describeStoreError(
  error: StoreInputError | StoreUnavailableError,
): string {
  if (error instanceof StoreInputError) return inputProblem(error);
  return error.code === "change_unconfirmed"
    ? `The key store did not answer within ${error.timeoutMs} ms, so a change may or may not have been made; check with "keys list --all" and "keys audit" before trying again`
    : error.message;
}
