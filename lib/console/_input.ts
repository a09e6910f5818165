/**
 * What the admin typed, checked before the store is touched.
 *
 * @module
 */

import { StoreInputError } from "../store.ts";
import type { Context } from "./command.ts";
import { UsageError } from "./errors.ts";

/**
 * Input checked by one of the store's rules: a refusal is a usage error
 * (exit 2) naming the option.
 */
export function checked(
  normalize: (text: string) => string,
  text: string,
): string {
  try {
    return normalize(text);
  } catch (error) {
    if (error instanceof StoreInputError && error.field !== undefined) {
      throw new UsageError(`--${error.field}: ${error.message}`);
    }
    throw error;
  }
}

/** A string option that must be given and not blank. */
export function required(values: Context["values"], option: string): string {
  const value = values[option];
  if (typeof value !== "string" || value.trim() === "") {
    throw new UsageError(`--${option} is required`);
  }
  return value;
}
