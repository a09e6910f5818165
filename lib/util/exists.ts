/**
 * Whether a path exists, a link counted as itself: for code that must tell
 * "nothing there" from any other failure, which it lets through.
 */

/** True when `path` names anything, false when nothing is there. */
export async function pathExists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}
