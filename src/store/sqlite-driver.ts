/**
 * better-sqlite3 for the Node that runs us. 13.x is built on Node-API 10, which Node 20 lacks
 * (it crashes on load there). 12.x wraps its objects with node::ObjectWrap, whose cleanup hooks
 * abort Node 24.19 and later when a database or statement is garbage collected
 * (nodejs/node#65446). Both are installed, 12.x under the alias better-sqlite3-node20 (optional:
 * a Node that cannot build it never loads it), and the one this Node runs safely is loaded. The
 * two have the same API, so the types are 13.x's.
 */
import { createRequire } from 'node:module';
import type BetterSqlite3 from 'better-sqlite3';

const require = createRequire(import.meta.url);

export const Database = require(Number(process.versions.napi) >= 10 ? 'better-sqlite3' : 'better-sqlite3-node20') as typeof BetterSqlite3;
export type Database = BetterSqlite3.Database;
export type Statement = BetterSqlite3.Statement;
