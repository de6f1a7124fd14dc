/** A runtime's console log: the end of its serial output, for debugging a boot. */
import { Type } from '@sinclair/typebox';
import { ConsoleLog, ConsoleLogQuery, DataOf, RuntimeParams } from '../schemas.js';
import type { RoutePlugin } from './common.js';
import { DEFAULT_CONSOLE_LOG_BYTES } from '../../core/console-log.js';

export const consoleLogRoutes: RoutePlugin = async (app, { core }) => {
  app.get('/v1/runtimes/:runtime_id/console-log', {
    config: { scope: 'runtimes:read', forward: 'runtime' },
    schema: {
      operationId: 'getRuntimeConsoleLog',
      tags: ['runtimes'],
      summary: "The end of a runtime's serial console output (kernel and init boot messages), in any state",
      params: RuntimeParams,
      querystring: ConsoleLogQuery,
      response: { 200: DataOf(Type.Ref(ConsoleLog), "the end of the runtime's console log") },
    },
  }, async (req) => ({ data: await core.consoleLogs.read(req.principal.tenantId, req.params.runtime_id, req.query.max_bytes ?? DEFAULT_CONSOLE_LOG_BYTES) }));
};
