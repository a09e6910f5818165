/**
 * A path fit for a log line: a typo stays visible, key-shaped parts become
 * `[key-shaped]` in place. The path is decoded as the key check reads it
 * (every ASCII `%XX`, layer after layer) and cut into runs of letters and
 * digits (tokens). Withheld: (1) a token holding `isk_` (any case) and the
 * token after it; (2) a token of 16+ characters, or with a capital (a key
 * body is all lower case or digits 3 times in a billion), unless it is a
 * route segment in other case or mistyped; (3) anything still escaped, and
 * a raw run of 8+ that escapes are part of (`%25abcdefgh`); (4) once any is
 * withheld, neighbouring tokens adding up to 8+ between withheld parts: a
 * key split into pieces. Adjacent withheld parts are one marker.
 *
 * @module
 */

// Decoded to as many layers as the key check decodes; here each character
// keeps its raw span.
import { MAX_LAYERS } from "../util/ascii_escapes.ts";

/** The marker a withheld part is logged as. */
export const KEY_SHAPED = "[key-shaped]";

/** A run this long is most of a key: withheld whatever it looks like. */
const LONG_RUN = 16;
/** Pieces next to a key-shaped part: withheld from this many characters together. */
const SPREAD_LIMIT = 8;
/** Words with capitals compared with the routes' segments, per path. */
const ROUTE_LOOKUPS = 16;

const TOKEN = /[0-9A-Za-z]+/g;
const WORD = /^[0-9a-z]+$/;
const PREFIXED = /isk_/gi;
const STILL_ESCAPED = /%[0-7][0-9A-Fa-f]/g;

export interface LoggableOptions {
  /** Logged as they are; their segments, in any case or mistyped, are not key-shaped. */
  routes?: ReadonlySet<string>;
}

export function loggablePath(
  path: string,
  options: LoggableOptions = {},
): string {
  const { routes } = options;
  if (routes?.has(path)) return path;
  const decoded = decodeWithSpans(path);
  const { text } = decoded;
  // A non-ASCII escape's hex digits (`%C3%A9`) are no capitals.
  const words = text.includes("%")
    ? text.replace(/%[89A-Fa-f][0-9A-Fa-f]/g, (escape) => escape.toLowerCase())
    : text;
  const withheld = new Uint8Array(text.length);
  const mark = (from: number, to: number) => withheld.fill(1, from, to);
  for (const [from, to] of around(text, PREFIXED)) mark(from, to);
  if (decoded.spans !== null) {
    for (const [from, to] of around(text, STILL_ESCAPED)) mark(from, to);
    markEscapedRuns(path, decoded.spans, mark);
  }
  const segments = routes === undefined ? undefined : segmentsOf(routes);
  const tokens = [...words.matchAll(TOKEN)].map((match) => ({
    start: match.index,
    end: match.index + match[0].length,
    out: false,
    // Too long to be a piece of a key by chance: it parts pieces.
    route: match[0].length >= 6 && segments?.includes(match[0]) === true,
  }));
  let found = false;
  // A hostile path of thousands of capitalised words costs no more.
  let lookups = ROUTE_LOOKUPS;
  for (const token of tokens) {
    const word = words.slice(token.start, token.end);
    token.out = withheld.subarray(token.start, token.end).includes(1) ||
      word.length >= LONG_RUN ||
      (!WORD.test(word) && !(lookups-- > 0 && routeLike(word, segments)));
    found ||= token.out;
  }
  if (!found && !withheld.includes(1)) return path;
  withholdSpreads(tokens);
  for (const [i, token] of tokens.entries()) {
    if (!token.out) continue;
    // Neighbouring withheld tokens, and what separates them, are one part.
    const next = tokens[i + 1];
    mark(token.start, next?.out ? next.start : token.end);
  }
  return rebuild(path, decoded, withheld);
}

/**
 * Rule 4: between withheld tokens (or route segments of 6 or more, which no
 * key holds by chance), runs of kept ones adding up to the limit.
 */
function withholdSpreads(
  tokens: { start: number; end: number; out: boolean; route: boolean }[],
) {
  let from = 0;
  let length = 0;
  for (let i = 0; i <= tokens.length; i++) {
    const token = tokens[i];
    if (token !== undefined && !token.out && !token.route) {
      length += token.end - token.start;
      continue;
    }
    if (length >= SPREAD_LIMIT) {
      for (let j = from; j < i; j++) tokens[j].out = true;
    }
    from = i + 1;
    length = 0;
  }
}

interface Decoded {
  text: string;
  /** Per decoded character, its raw start and end; `null` when nothing was escaped. */
  spans: { starts: number[]; ends: number[] } | null;
}

/** `path` with every ASCII escape decoded, as `decodeAsciiEscapes` does, keeping where each character came from. */
function decodeWithSpans(path: string): Decoded {
  if (!path.includes("%")) return { text: path, spans: null };
  let codes = Array.from({ length: path.length }, (_, i) => path.charCodeAt(i));
  let starts = codes.map((_, i) => i);
  let ends = codes.map((_, i) => i + 1);
  let changed = false;
  for (let layer = 0; layer < MAX_LAYERS; layer++) {
    const next: number[] = [];
    const nextStarts: number[] = [];
    const nextEnds: number[] = [];
    let escapes = 0;
    let left = false;
    for (let i = 0; i < codes.length; i++) {
      const high = hexValue(codes[i + 1]);
      const low = hexValue(codes[i + 2]);
      if (codes[i] === PERCENT && high >= 0 && high < 8 && low >= 0) {
        next.push(high * 16 + low);
        nextStarts.push(starts[i]);
        nextEnds.push(ends[i + 2]);
        i += 2;
        escapes++;
      } else {
        next.push(codes[i]);
        nextStarts.push(starts[i]);
        nextEnds.push(ends[i]);
      }
      left ||= next[next.length - 1] === PERCENT;
    }
    if (escapes === 0) break;
    changed = true;
    [codes, starts, ends] = [next, nextStarts, nextEnds];
    if (!left) break;
  }
  if (!changed) return { text: path, spans: null };
  let text = "";
  for (let i = 0; i < codes.length; i += 4096) {
    text += String.fromCharCode(...codes.slice(i, i + 4096));
  }
  return { text, spans: { starts, ends } };
}

const PERCENT = 0x25;

function hexValue(code: number | undefined): number {
  if (code === undefined) return -1;
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  const lower = code | 0x20;
  return lower >= 0x61 && lower <= 0x66 ? lower - 0x61 + 10 : -1;
}

/** Each match of `pattern`, with the letters and digits it touches on either side. */
function* around(
  text: string,
  pattern: RegExp,
): Generator<[number, number]> {
  for (const match of text.matchAll(pattern)) {
    let from = match.index;
    let to = from + match[0].length;
    while (from > 0 && isAlphanumeric(text.charCodeAt(from - 1))) from--;
    while (to < text.length && isAlphanumeric(text.charCodeAt(to))) to++;
    yield [from, to];
  }
}

function isAlphanumeric(code: number): boolean {
  const lower = code | 0x20;
  return (code >= 0x30 && code <= 0x39) || (lower >= 0x61 && lower <= 0x7a);
}

/**
 * Rule 3's raw half: a raw run of the limit's length that escapes are part of
 * is logged as is, though it decodes shorter (`%25abcdefgh` is `%abcdefgh`).
 */
function markEscapedRuns(
  path: string,
  spans: { starts: number[]; ends: number[] },
  mark: (from: number, to: number) => void,
): void {
  const { starts, ends } = spans;
  const inEscape = new Uint8Array(path.length);
  for (let i = 0; i < starts.length; i++) {
    if (ends[i] - starts[i] > 1) inEscape.fill(1, starts[i], ends[i]);
  }
  let at = 0;
  for (const run of path.matchAll(TOKEN)) {
    const from = run.index;
    const to = from + run[0].length;
    if (to - from < SPREAD_LIMIT || !inEscape.subarray(from, to).includes(1)) {
      continue;
    }
    // The decoded characters whose raw spans meet the run.
    while (at < starts.length && ends[at] <= from) at++;
    let last = at;
    while (last < starts.length && starts[last] < to) last++;
    mark(at, last);
  }
}

/** The raw path with each withheld run of decoded characters replaced by the marker. */
function rebuild(path: string, decoded: Decoded, withheld: Uint8Array): string {
  const { text, spans } = decoded;
  let out = "";
  for (let i = 0; i < text.length;) {
    const start = spans === null ? i : spans.starts[i];
    if (withheld[i]) {
      while (i < text.length && withheld[i]) i++;
      out += KEY_SHAPED;
    } else {
      while (i < text.length && !withheld[i]) i++;
      out += path.slice(start, spans === null ? i : spans.ends[i - 1]);
    }
  }
  return out;
}

const segmentCache = new WeakMap<ReadonlySet<string>, string[]>();

/** The routes' segments, lower case, worked out once per set. */
function segmentsOf(routes: ReadonlySet<string>): string[] {
  let segments = segmentCache.get(routes);
  if (segments === undefined) {
    segments = [
      ...new Set(
        [...routes].flatMap((route) => route.toLowerCase().split("/")),
      ),
    ].filter((segment) => segment !== "");
    segmentCache.set(routes, segments);
  }
  return segments;
}

/** A route's segment in other case, or mistyped by up to two edits in a segment of 6 or more. */
function routeLike(word: string, segments: string[] | undefined): boolean {
  if (segments === undefined) return false;
  const lower = word.toLowerCase();
  return segments.some((segment) =>
    segment === lower ||
    (segment.length >= 6 && editsWithin(lower, segment, 2))
  );
}

/** Optimal string alignment distance of `a` and `b` at most `most`. */
function editsWithin(a: string, b: string, most: number): boolean {
  if (Math.abs(a.length - b.length) > most) return false;
  let before: number[] = [];
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(
        previous[j] + 1,
        row[j - 1] + 1,
        previous[j - 1] + cost,
      );
      if (
        i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]
      ) best = Math.min(best, before[j - 2] + 1);
      row.push(best);
    }
    if (Math.min(...row) > most) return false;
    [before, previous] = [previous, row];
  }
  return previous[b.length] <= most;
}
