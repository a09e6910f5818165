/**
 * OpenTelemetry through `Deno.telemetry`, without `npm:@opentelemetry/api`,
 * a thin wrapper over the same objects whose loading cost about 16 MB with
 * telemetry off. Off, Deno's meter provider throws: a counter is then a
 * no-op, decided at its first use.
 *
 * @module
 */

export interface Counter {
  add(value: number, attributes?: Record<string, string>): void;
}

export interface Span {
  setAttribute(name: string, value: string | number): void;
}

// `createContextKey` of @opentelemetry/api: the key under which the active
// span sits in a context, the same symbol in every copy of the package.
const SPAN_KEY = Symbol.for("OpenTelemetry Context Key SPAN");

/** Made on its first `add`. */
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
