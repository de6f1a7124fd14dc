// Every example connects the same way: the service's address and a token from the environment.
import { Vessel } from 'vessel/client';

export const vessel = new Vessel({
  url: process.env.VESSEL_URL ?? 'http://127.0.0.1:8080',
  token: process.env.VESSEL_TOKEN ?? '',
});

/** The runtime the examples work in (`VESSEL_RUNTIME`, an id or a name). */
export const runtimeName = process.env.VESSEL_RUNTIME ?? 'demo';
