/** AES-256-GCM sealing of secret values at rest. The format is `v1.<iv>.<tag>.<ciphertext>` in base64url. */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { internal } from './errors.js';

export class SecretBox {
  readonly #key: Buffer;

  constructor(key: Buffer) {
    if (key.length !== 32) throw internal('the master key must be 32 bytes');
    this.#key = key;
  }

  seal(plaintext: string, associatedData: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv);
    cipher.setAAD(Buffer.from(associatedData));
    const ct = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return ['v1', iv, cipher.getAuthTag(), ct].map((p) => (typeof p === 'string' ? p : p.toString('base64url'))).join('.');
  }

  /** associatedData binds the ciphertext to its secret id, so rows cannot be swapped. */
  open(sealed: string, associatedData: string): string {
    const [version, iv, tag, ct] = sealed.split('.');
    if (version !== 'v1' || iv === undefined || tag === undefined || ct === undefined) throw internal('sealed secret has an unknown format');
    const decipher = createDecipheriv('aes-256-gcm', this.#key, Buffer.from(iv, 'base64url'));
    decipher.setAAD(Buffer.from(associatedData));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(ct, 'base64url')), decipher.final()]).toString('utf8');
  }
}
