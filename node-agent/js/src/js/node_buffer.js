// node:buffer
import native from 'ac:native';
const { Buffer, constants, kMaxLength } = native.require('ac:buffer');
export { Buffer, constants, kMaxLength };
export const atob = globalThis.atob;
export const btoa = globalThis.btoa;
export const isUtf8 = (b) => { try { new TextDecoder('utf-8', { fatal: true }).decode(b); return true; } catch { return false; } };
export default { Buffer, constants, kMaxLength, atob, btoa, isUtf8 };
