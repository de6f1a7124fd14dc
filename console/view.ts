/** What every view of the console is: an element to show, and what to stop when it goes away. */
import type { Runtime, Vessel } from 'vessel/client';

export interface View {
  readonly element: HTMLElement;
  /** Stops its polls, closes its sockets and aborts its requests. */
  dispose(): void;
}

/** What a section of a runtime's page gets: the client, and the runtime as last polled. */
export interface RuntimeContext {
  readonly vessel: Vessel;
  readonly runtime: Runtime;
  /** Called after each poll of the runtime (its status, its policy); returns the unsubscribe. */
  onUpdate(listener: (runtime: Runtime) => void): () => void;
  /** Polls the runtime now, after a change a section made. */
  refresh(): Promise<void>;
}
