/**
 * What the admin typed, checked before the store is touched.
 *
 * @module
 */

import { InvalidFieldError } from "../store/errors.ts";
import { describeStoreError } from "./store_errors.ts";
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
    if (error instanceof InvalidFieldError) {
      throw new UsageError(`--${error.field}: ${describeStoreError(error)}`, {
        code: error.code,
      });
    }
    throw error;
  }
}

/** A string option that must be given and not blank. */
export function required(values: Context["values"], option: string): string {
  const value = values[option];
  if (typeof value !== "string" || value.trim() === "") {
    throw new UsageError(`--${option} is required`, {
      code: "option_required",
    });
  }
  return value;
}
