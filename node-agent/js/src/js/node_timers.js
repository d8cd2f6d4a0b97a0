// node:timers
import native from 'ac:native';
const t = native.require('ac:timers');
export const { setTimeout, setInterval, setImmediate, clearTimeout, clearInterval, clearImmediate } = t;
import * as promises from 'node:timers/promises';
export { promises };
export default { ...t, promises };
