// node:crypto: randomness only (no hashing or ciphers in this runtime).
import native from 'ac:native';
const { toBuffer } = native.require('ac:buffer');
const c = globalThis.crypto;
export const getRandomValues = (a) => c.getRandomValues(a);
export const randomUUID = () => c.randomUUID();
export function randomBytes(size, cb) {
  const b = toBuffer(new Uint8Array(size));
  for (let i = 0; i < size; i += 65536) c.getRandomValues(b.subarray(i, i + 65536));
  if (typeof cb === 'function') { queueMicrotask(() => cb(null, b)); return undefined; }
  return b;
}
export function randomInt(min, max) {
  if (max === undefined) { max = min; min = 0; }
  const range = max - min;
  const buf = new Uint32Array(1);
  c.getRandomValues(buf);
  return min + (buf[0] % range);
}
export const webcrypto = c;
export default { getRandomValues, randomUUID, randomBytes, randomInt, webcrypto };
