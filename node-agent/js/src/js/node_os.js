// node:os: a fixed description of the computer, nothing of the host.
export const EOL = '\n';
export const devNull = '/dev/null';
export const platform = () => 'linux';
export const type = () => 'Linux';
export const arch = () => 'x64';
export const release = () => '6.0.0';
export const hostname = () => 'computer';
export const homedir = () => '/workspace';
export const tmpdir = () => '/tmp';
export const endianness = () => 'LE';
export const cpus = () => [];
export const availableParallelism = () => 1;
export const totalmem = () => 0;
export const freemem = () => 0;
export const uptime = () => 0;
export const loadavg = () => [0, 0, 0];
export const networkInterfaces = () => ({});
// The sandbox user of every runtime (agentcomputer_runtime_contract::SANDBOX_USER
// and SANDBOX_UID; a test of the crate checks they agree).
export const userInfo = () => ({ uid: 1000, gid: 1000, username: 'sandbox', homedir: '/workspace', shell: '/bin/bash' });
export const constants = { signals: {}, errno: {} };
export default { EOL, devNull, platform, type, arch, release, hostname, homedir, tmpdir, endianness, cpus, availableParallelism, totalmem, freemem, uptime, loadavg, networkInterfaces, userInfo, constants };
