// node:timers/promises
import native from 'ac:native';
const { setTimeout: st, setImmediate: si, setInterval: sv, clearInterval } = native.require('ac:timers');

function aborted(signal) {
  return signal && signal.aborted ? (signal.reason || Object.assign(new Error('The operation was aborted'), { name: 'AbortError', code: 'ABORT_ERR' })) : null;
}

export function setTimeout(ms, value, options = {}) {
  const a = aborted(options.signal);
  if (a) return Promise.reject(a);
  return new Promise((resolve) => {
    const t = st(() => resolve(value), ms);
    if (options.ref === false) t.unref();
  });
}
export function setImmediate(value, options = {}) {
  const a = aborted(options.signal);
  if (a) return Promise.reject(a);
  return new Promise((resolve) => si(() => resolve(value)));
}
export async function* setInterval(ms, value) {
  const queue = [];
  let wake = null;
  const t = sv(() => { queue.push(value); if (wake) { wake(); wake = null; } }, ms);
  try {
    for (;;) {
      if (!queue.length) await new Promise((r) => { wake = r; });
      yield queue.shift();
    }
  } finally {
    clearInterval(t);
  }
}
export const scheduler = { wait: (ms) => setTimeout(ms), yield: () => setImmediate() };
export default { setTimeout, setImmediate, setInterval, scheduler };
