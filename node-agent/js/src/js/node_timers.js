// node:timers
import * as t from 'ac:timers';
export { setTimeout, setInterval, setImmediate, clearTimeout, clearInterval, clearImmediate } from 'ac:timers';
import * as promises from 'node:timers/promises';
export { promises };
export default { ...t, promises };
