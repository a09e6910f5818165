/**
 * OpenTelemetry through `Deno.telemetry`, the providers Deno itself
 * registers (`OTEL_DENO=true`), with no npm package: `npm:@opentelemetry/api`
 * is a thin wrapper over these same objects, and loading it (and the Node
 * compatibility layer under it) cost the server about 16 MB of memory with
 * telemetry off, as it is by default.
 *
 * With telemetry off, Deno's meter provider refuses to make meters (it
 * throws), where the npm package would hand out no-op ones: a counter is
 * then a no-op, decided once, at its first use.
 *
 * @module
 */

/** A monotonic counter, as OpenTelemetry's `Counter`. */
export interface Counter {
  add(value: number, attributes?: Record<string, string>): void;
}

/** The part of a span the service writes. */
export interface Span {
  setAttribute(name: string, value: string | number): void;
}

// `createContextKey` of @opentelemetry/api: the key under which the active
// span sits in a context, the same symbol in every copy of the package.
const SPAN_KEY = Symbol.for("OpenTelemetry Context Key SPAN");

/** A counter named `name`, made on its first `add`. */
export function counter(
  name: string,
  options: { description: string },
): Counter {
  let made: Counter | null = null;
  return {
    add(value, attributes) {
      made ??= make(name, options);
      made.add(value, attributes);
    },
  };
}

const NO_COUNTER: Counter = { add() {} };

function make(name: string, options: { description: string }): Counter {
  try {
    return Deno.telemetry.meterProvider
      .getMeter("integration-service")
      .createCounter(name, options) as Counter;
  } catch {
    // Telemetry is off (OTEL_DENO unset): nothing to count into.
    return NO_COUNTER;
  }
}

/** The span of the request being handled, if telemetry is on. */
export function activeSpan(): Span | undefined {
  const context = Deno.telemetry.contextManager.active();
  return context?.getValue(SPAN_KEY) as Span | undefined;
}
