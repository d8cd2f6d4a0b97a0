// node:process
import native from 'ac:native';
const { process } = native.require('ac:process');
export const { env, argv, platform, arch, version, versions, pid, stdout, stderr, stdin } = process;
export const cwd = () => process.cwd();
export const chdir = (d) => process.chdir(d);
export const exit = (c) => process.exit(c);
export const nextTick = (fn, ...a) => process.nextTick(fn, ...a);
export const hrtime = process.hrtime;
export const memoryUsage = () => process.memoryUsage();
export const uptime = () => process.uptime();
export const emitWarning = (w, t) => process.emitWarning(w, t);
export default process;
