/** Runs a host command to completion, with its output line by line for progress displays. */
import { spawn } from 'node:child_process';

export interface RunOptions {
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  onLine?: (line: string) => void;
  input?: string;
}

export function runCommand(cmd: string, args: string[], opts: RunOptions = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { cwd: opts.cwd, env: opts.env ?? process.env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    let tail = '';
    let partial = '';
    const onData = (chunk: Buffer) => {
      const text = chunk.toString();
      out += text;
      tail = (tail + text).slice(-4000);
      if (opts.onLine) {
        const lines = (partial + text).split('\n');
        partial = lines.pop() ?? '';
        for (const l of lines) opts.onLine(l);
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    // A command that exits before reading its input closes the pipe; its exit status tells why.
    child.stdin.on('error', () => undefined);
    child.stdin.end(opts.input ?? '');
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${args.slice(0, 3).join(' ')} failed (${signal ?? code}):\n${tail.trim()}`));
    });
  });
}
