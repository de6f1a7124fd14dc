// Files and directories: text, bytes and streams in; streams out; whole directories as tar.
import { createReadStream } from 'node:fs';
import { mkdtemp, readFile, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { vessel, runtimeName } from './connect.js';

const rt = await vessel.runtimes.get(runtimeName);

await rt.files.write('/work/hello.txt', 'hello\n');
console.log(await rt.files.readText('/work/hello.txt'));

// A Node stream (or a web ReadableStream) is sent as it is read.
const local = await mkdtemp(join(tmpdir(), 'vessel-example-'));
await writeFile(join(local, 'data.bin'), new Uint8Array([0, 1, 2, 255]));
await rt.files.write('/work/data.bin', createReadStream(join(local, 'data.bin')));
console.log(await rt.files.readBytes('/work/data.bin'));

// Directories: a local one up, a remote one down (Node); tar streams work everywhere.
await mkdir(join(local, 'project/src'), { recursive: true });
await writeFile(join(local, 'project/src/main.py'), 'print("hi")\n');
await rt.files.upload(join(local, 'project'), '/work/project');
console.log((await rt.files.list('/work/project/src')).map((f) => `${f.name} ${f.size_bytes}`));
await rt.files.download('/work/project', join(local, 'copy'));
console.log(await readFile(join(local, 'copy/src/main.py'), 'utf8'));

console.log((await rt.files.stat('/work/project')).type);
await rt.files.remove('/work', { recursive: true });
