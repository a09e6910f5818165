/**
 * Fixed-width columns, so a listing streams row by row from the store: widths
 * come from headings and terminal, never the data. Cells escape control and
 * bidirectional characters, so a stored field cannot move the cursor, recolour
 * the screen or reorder a line.
 *
 * @module
 */

import { escapeControlCharacters } from "../util/control_characters.ts";

export interface Column<T> {
  /** The heading, also the name the colouring and the fitting go by. */
  heading: string;
  /** Characters the column takes, its widest cell cut with an ellipsis. */
  width: number;
  /** How narrow a terminal may squeeze the column; `width` when unset. */
  min?: number;
  /**
   * When even the narrowest columns overflow the terminal, columns with a
   * rank are left out, lowest rank first; columns without one always stay.
   */
  dropRank?: number;
  /** The cell's text for a row, before it is escaped and cut. */
  cell: (row: T) => string;
}

/**
 * How {@linkcode headingLine} and {@linkcode rowLine} decorate a cell: after
 * cutting, before padding, so colour codes never count towards the width.
 */
type LineOptions<T> = { paint?: (text: string, column: Column<T>) => string };

export function headingLine<T>(
  columns: Column<T>[],
  options: LineOptions<T> = {},
): string {
  return line(columns, (c) => c.heading, options);
}

export function rowLine<T>(
  columns: Column<T>[],
  row: T,
  options: LineOptions<T> = {},
): string {
  return line(columns, (c) => c.cell(row), options);
}

/**
 * Fits columns into `width`: squeezes those with most room towards `min`, then
 * drops by `dropRank`, else keeps the rest at minimum. Returns the columns kept
 * at their widths, and the headings left out.
 */
export function fitColumns<T>(
  columns: Column<T>[],
  width: number,
): { columns: Column<T>[]; dropped: string[] } {
  const droppable = columns.filter((c) => c.dropRank !== undefined)
    .sort((a, b) => a.dropRank! - b.dropRank!);
  let kept = columns;
  for (const next of droppable) {
    if (lineWidth(kept, (c) => c.min ?? c.width) <= width) break;
    kept = kept.filter((c) => c !== next);
  }
  const widths = kept.map((c) => c.width);
  let excess = lineWidth(kept, (c) => c.width) - width;
  while (excess > 0) {
    let widest = -1;
    let room = 0;
    kept.forEach((c, i) => {
      const spare = widths[i] - (c.min ?? c.width);
      if (spare > room) [widest, room] = [i, spare];
    });
    if (widest < 0) break;
    widths[widest]--;
    excess--;
  }
  return {
    columns: kept.map((c, i) => ({ ...c, width: widths[i] })),
    dropped: columns.filter((c) => !kept.includes(c)).map((c) => c.heading),
  };
}

const GAP = "  ";

function lineWidth<T>(
  columns: Column<T>[],
  width: (column: Column<T>) => number,
): number {
  return columns.reduce((sum, c) => sum + width(c), 0) +
    GAP.length * Math.max(0, columns.length - 1);
}

function line<T>(
  columns: Column<T>[],
  text: (column: Column<T>) => string,
  options: LineOptions<T>,
): string {
  return columns.map((column, i) => {
    const flat = escapeControlCharacters(text(column)).replace(/\s+/g, " ");
    const chars = [...flat];
    const cut = chars.length > column.width
      ? chars.slice(0, column.width - 1).join("") + "…"
      : flat;
    const shown = options.paint ? options.paint(cut, column) : cut;
    return i === columns.length - 1
      ? shown
      : shown + " ".repeat(Math.max(0, column.width - [...cut].length));
  }).join(GAP).trimEnd();
}
