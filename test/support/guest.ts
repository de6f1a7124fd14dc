/** Shell snippets run inside test guests. */

/**
 * A background loop that counts up in /root/counter ten times a second. Each value is written
 * to a temporary file and renamed over the counter, so a reader never sees the file truncated
 * and half-written (`echo $i > file` truncates first, and a read in between saw it empty).
 */
export const COUNTER_LOOP =
  "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /root/counter.tmp; mv /root/counter.tmp /root/counter; sleep 0.1; done' >/dev/null 2>&1 &";

/** The counter's current value; NaN would mean a torn read, which the rename rules out. */
export const READ_COUNTER = 'cat /root/counter';

/**
 * Reads a few thousand files of the image and imports Python's heavier modules: a guest whose
 * memory or disk came from a damaged checkpoint fails here (segfaults, EUCLEAN), and the
 * digest of what it read must be the same in every VM of one image.
 */
export const HEAVY_READ =
  'python3 -c "import json, sqlite3, ssl; print(\'imports ok\')" && find /usr/lib /usr/share -type f 2>/dev/null | sort | head -3000 | xargs -d "\\n" cat | sha256sum | cut -d" " -f1';
