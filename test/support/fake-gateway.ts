/** A gateway for API tests without VMs: hands out TAP names and remembers what it enforces. */
import type { EgressSubject, NetworkGateway } from '../../src/core/ports.js';

export class FakeGateway implements NetworkGateway {
  readonly subjects = new Map<string, EgressSubject>();
  #next = 1;
  readonly #taps = new Map<string, string>();

  async attach(subject: EgressSubject): Promise<string> {
    this.subjects.set(subject.runtimeId, subject);
    let tap = this.#taps.get(subject.runtimeId);
    if (tap === undefined) this.#taps.set(subject.runtimeId, (tap = `fake${this.#next++}`));
    return tap;
  }

  async update(subject: EgressSubject): Promise<void> {
    if (this.subjects.has(subject.runtimeId)) this.subjects.set(subject.runtimeId, subject);
  }

  async detach(runtimeId: string): Promise<void> {
    this.subjects.delete(runtimeId);
    this.#taps.delete(runtimeId);
  }

  async restore(subjects: EgressSubject[]): Promise<void> {
    for (const s of subjects) if (this.#taps.has(s.runtimeId)) this.subjects.set(s.runtimeId, s);
  }

  async close(): Promise<void> {}
}
