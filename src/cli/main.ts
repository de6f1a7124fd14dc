#!/usr/bin/env node
/**
 * The `vessel` command's entry point. Node's compile cache (Node 22.1 and later) is turned on
 * before any other module loads, so that a run after the first does not compile the CLI, the SDK
 * and their dependencies again: a script calling `vessel` a hundred times pays it once.
 */
import * as nodeModule from 'node:module';

(nodeModule as { enableCompileCache?: () => unknown }).enableCompileCache?.();
const { runCli } = await import('./program.js');
const { exitWith } = await import('./shared/client.js');
const status = await runCli(process.argv.slice(2));
if (status !== 0) await exitWith(status);
