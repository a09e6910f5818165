/**
 * What the admin typed, checked before the store is touched.
 *
 * @module
 */

import { RateSyntaxError } from "../auth/rate_limit.ts";
import { InvalidFieldError } from "../store/errors.ts";
import { describeStoreError } from "./store_errors.ts";
import type { Context } from "./command.ts";
import { ConsoleError } from "./errors.ts";

/**
 * Input checked by one of the store's rules, or by the rate's parser: a
 * refusal is a usage error (exit 2) naming the option and the fix.
 */
export function checked<T>(normalize: (text: string) => T, text: string): T {
  try {
    return normalize(text);
  } catch (error) {
    if (error instanceof InvalidFieldError) {
      // The field allowFrom is the option --allow-from.
      const option = error.field.replace(
        /[A-Z]/g,
        (c) => `-${c.toLowerCase()}`,
      );
      throw new ConsoleError(`--${option}: ${describeStoreError(error)}`, {
        code: error.code,
        usage: true,
      });
    }
    if (error instanceof RateSyntaxError) {
      throw new ConsoleError(`--rate: ${error.message}`, {
        code: error.code,
        usage: true,
      });
    }
    throw error;
  }
}

/** A string option that must be given and not blank. */
export function required(values: Context["values"], option: string): string {
  const value = values[option];
  if (typeof value !== "string" || value.trim() === "") {
    throw new ConsoleError(`--${option} is required`, {
      code: "option_required",
    });
  }
  return value;
}
