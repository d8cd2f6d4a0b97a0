// node:module: createRequire for the built-ins.
export const createRequire = () => globalThis.require;
export const builtinModules = ['buffer', 'crypto', 'events', 'fs', 'fs/promises', 'module', 'os', 'path', 'process', 'timers', 'timers/promises', 'url', 'util'];
export const isBuiltin = (s) => builtinModules.includes(String(s).replace(/^node:/, ''));
export default { createRequire, builtinModules, isBuiltin };
