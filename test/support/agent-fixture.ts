/**
 * One agent behind a relay, with a connected client, for a test file: started before its tests
 * and stopped after them. A test that reconnects replaces `client`.
 */
import { after, before } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient } from '../../src/vm/agent/agent-client.js';
import { RelayedAgent, type AgentBuild } from './agent-harness.js';

export interface AgentFixture {
  dir: string;
  agent: RelayedAgent;
  client: AgentClient;
}

export function agentFixture(name: string, build: AgentBuild): AgentFixture {
  const fx = {} as AgentFixture;
  if ('skip' in build) return fx;
  before(async () => {
    fx.dir = mkdtempSync(join(tmpdir(), `vessel-agent-${name}-`));
    fx.agent = await RelayedAgent.start(build.binary, fx.dir);
    fx.client = await AgentClient.connect(fx.agent.path);
  });
  after(async () => {
    fx.client.close();
    await fx.agent.stop();
    rmSync(fx.dir, { recursive: true, force: true });
  });
  return fx;
}
