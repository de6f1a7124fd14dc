// A secret, a rule that injects it into a runtime's requests to one host, and the audits.
import { vessel, runtimeName } from './connect.js';

const rt = await vessel.runtimes.get(runtimeName);
const secret = await vessel.secrets.create({ name: `api-key-${Date.now()}`, value: 'sk-example' });
const rule = await rt.rules.create({
  host: 'api.example.com',
  secret: secret.id,
  injection: { headerName: 'Authorization', valueFormat: 'Bearer ${credential}' },
});
console.log(`rule ${rule.id} injects ${rule.credential_display_name} for ${rule.host_pattern}`);

// Lists come a page at a time; for await walks every item of every page.
for await (const r of rt.rules.list()) console.log('rule', r.host_pattern, r.path_pattern);
for await (const audit of vessel.audits.list({ runtime: rt.id, limit: 10 })) console.log(audit.created_at, audit.category, audit.payload.egress?.kind);

await rt.rules.delete(rule.id);
await vessel.secrets.delete(secret.id);
