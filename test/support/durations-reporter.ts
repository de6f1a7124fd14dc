/**
 * A node:test reporter that prints, once the run ends, how long each test file took, slowest
 * first, so a slow file shows in every CI log. It runs beside the spec reporter, which still
 * prints the results and the closing counts.
 *
 * A file's time is the wall time from when the runner takes it up (its wrapper test is dequeued)
 * to when it completes, as this reporter receives them: that includes its before/after hooks
 * (where VM tests boot their guests), which the tests' own durations leave out. The last line repeats the run's counts as `N passed, N failed`, so
 * the closing line of the log is the counts whichever reporter finishes last.
 *
 * With VESSEL_TEST_FAILURES naming a file, each failed test's file, name and error are appended
 * to it: CI prints them at the very end, where a log cut to its tail still shows why.
 */
import { appendFileSync } from 'node:fs';
import { relative, resolve } from 'node:path';

interface TestEvent {
  type: string;
  data?: { file?: string; name?: string; nesting?: number; message?: string; details?: { error?: unknown } };
}

/** Enough of an error to say why, not a whole dump of a large actual value. */
const MAX_FAILURE_CHARS = 2000;

/** The assertion's own message: node:test wraps a test's error, with the thrown one as its cause. */
function failureText(error: unknown): string {
  const thrown = error instanceof Error && error.cause !== undefined ? error.cause : error;
  const text = thrown instanceof Error ? `${thrown.name}: ${thrown.message}` : String(thrown);
  return text.length > MAX_FAILURE_CHARS ? `${text.slice(0, MAX_FAILURE_CHARS)}…` : text;
}

interface Span {
  first: number;
  last: number;
  failed: boolean;
}

/** The runner wraps each file in a test named after it (the absolute path on Node 20, relative on 24). */
const isFileWrapper = (data: NonNullable<TestEvent['data']>): boolean =>
  data.nesting === 0 && data.file !== undefined && data.name !== undefined && resolve(data.name) === data.file;

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

export default async function* durations(source: AsyncIterable<TestEvent>): AsyncGenerator<string> {
  const spans = new Map<string, Span>();
  const runStart = Date.now();
  const counts = new Map<string, number>();
  for await (const event of source) {
    // The run's own summary: diagnostics such as "pass 12" with no file.
    const summary = event.type === 'test:diagnostic' && event.data?.file === undefined ? /^(pass|fail) (\d+)$/.exec(event.data?.message ?? '') : null;
    if (summary !== null) counts.set(summary[1]!, Number(summary[2]));
    const data = event.data;
    const file = data?.file;
    if (data === undefined || file === undefined) continue;
    const now = Date.now();
    if (event.type === 'test:dequeue' && isFileWrapper(data)) spans.set(file, { first: now, last: now, failed: false });
    const span = spans.get(file);
    if (span === undefined) continue;
    if (event.type === 'test:complete' && isFileWrapper(data)) span.last = now;
    if (event.type === 'test:fail') {
      span.failed = true;
      const failures = process.env.VESSEL_TEST_FAILURES;
      // A file fails when one of its tests did (already written), or on its own, as when it crashes.
      const forItsTests = isFileWrapper(data) && (data.details?.error as { failureType?: string } | undefined)?.failureType === 'subtestsFailed';
      if (failures !== undefined && failures !== '' && !forItsTests) {
        const indented = failureText(data.details?.error).replace(/\n/g, '\n    ');
        appendFileSync(failures, `${relative(process.cwd(), file)} › ${data.name ?? '?'} (Node ${process.version})\n    ${indented}\n`);
      }
    }
  }
  const rows = [...spans].map(([file, s]) => ({ file: relative(process.cwd(), file), ms: s.last - s.first, failed: s.failed }));
  rows.sort((a, b) => b.ms - a.ms);
  const width = Math.max(...rows.map((r) => r.file.length), 4);
  yield `\nTest files by duration (${rows.length} files, ${seconds(Date.now() - runStart)} in all):\n`;
  for (const r of rows) yield `  ${r.file.padEnd(width)}  ${seconds(r.ms).padStart(9)}${r.failed ? '  (failed)' : ''}\n`;
  if (counts.has('pass') && counts.has('fail')) yield `\n${counts.get('pass')} passed, ${counts.get('fail')} failed\n`;
}
