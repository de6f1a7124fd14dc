/**
 * The gateway's process (gateway.ts starts it): the listeners that parse what guests and visitors
 * send, as the `vessel-gateway` user with no capabilities. It holds the egress CA's key (it signs
 * the leaves it presents to guests) and the secrets it was given for the requests it injects, for
 * their cache time; never the master key, a token or the store.
 */
import pino from 'pino';
import type { EgressSubject } from '../core/ports.js';
import type { PartLink } from '../platform/part-link.js';
import { NoteBatch } from '../platform/note-batch.js';
import { dropPrivileges, runPart, type PartUser } from '../platform/part-process.js';
import { CertificateAuthority } from './certificate-authority.js';
import { GatewayListeners, type Attachment, type ListenerHooks, type ListenerSettings } from './gateway-listeners.js';
import { MAX_AUDIT_BATCH } from './gateway-requests.js';

export interface GatewayPartSettings {
  listeners: ListenerSettings;
  ca: { certPem: string; keyPem: string };
  /** Whether VESSEL_DNS_OVERRIDES is set: the service reads the file and answers for it. */
  dnsOverrides: boolean;
  user: PartUser;
  logLevel: string;
}

/** A runtime's egress and ingress are activity (GatewayHooks.activity); once a second per runtime is plenty to keep it awake. */
const ACTIVITY_EVERY_MS = 1000;

function hooksOver(link: PartLink, dnsOverrides: boolean): ListenerHooks {
  const lastActivity = new Map<string, number>();
  const audits = new NoteBatch<object>((items) => link.notify('audits', items), MAX_AUDIT_BATCH);
  return {
    revealSecret: (tenantId, secretId) => link.call('revealSecret', { tenantId, secretId }),
    audit: (runtimeId, tenantId, kind, detail) => audits.push({ runtimeId, tenantId, kind, detail }),
    activity: (runtimeId) => {
      const now = Date.now();
      if ((lastActivity.get(runtimeId) ?? 0) > now - ACTIVITY_EVERY_MS) return;
      lastActivity.set(runtimeId, now);
      if (lastActivity.size > 10_000) lastActivity.clear();
      link.notify('activity', { runtimeId });
    },
    ingressTarget: (runtimeId, port) => link.call('ingressTarget', { runtimeId, port }),
    dnsOverride: (name) => (dnsOverrides ? link.call<string[] | null>('dnsOverride', { name }).then((v) => v ?? undefined) : undefined),
  };
}

let listeners: GatewayListeners | null = null;
const running = (): GatewayListeners => {
  if (listeners === null) throw new Error('the gateway has not started');
  return listeners;
};

runPart(
  (link) => {
    link.handle('add', (a) => running().add(a as Attachment));
    link.handle('update', (subject) => running().update(subject as EgressSubject));
    link.handle('remove', (runtimeId) => running().remove(runtimeId as string));
    link.handle('replaceAll', (all) => running().replaceAll(all as Attachment[]));
  },
  async (raw, link) => {
    const settings = raw as GatewayPartSettings;
    const log = pino({ level: settings.logLevel, base: { part: 'gateway', pid: process.pid } });
    const ca = await CertificateAuthority.fromPem(settings.ca.certPem, settings.ca.keyPem);
    // Nothing from a guest or a visitor has been read yet: from here on this process is no one.
    dropPrivileges(settings.user);
    listeners = new GatewayListeners(settings.listeners, ca, hooksOver(link, settings.dnsOverrides), log);
    await listeners.listen();
  },
);
