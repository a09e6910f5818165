/**
 * Fixed-width text columns, so that a listing of any length can be printed
 * row by row as it streams from the store, without reading it all first.
 */

/** One column: heading, width, and how to take the cell from a row. */
export interface Column<T> {
  heading: string;
  width: number;
  cell: (row: T) => string;
}

/** The heading line. */
export function headingLine<T>(columns: Column<T>[]): string {
  return line(columns.map((c) => [c.heading, c.width]));
}

/** One row, every cell cut to its column with an ellipsis. */
export function rowLine<T>(columns: Column<T>[], row: T): string {
  return line(columns.map((c) => [c.cell(row), c.width]));
}

function line(cells: [string, number][]): string {
  return cells.map(([text, width], i) => {
    const flat = text.replace(/\s+/g, " ");
    const chars = [...flat];
    const cut = chars.length > width
      ? chars.slice(0, width - 1).join("") + "…"
      : flat;
    return i === cells.length - 1
      ? cut
      : cut + " ".repeat(width - [...cut].length);
  }).join("  ").trimEnd();
}
