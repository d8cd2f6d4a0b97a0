// node:fs
import native from 'ac:native';
const fs = native.require('ac:fs');

export const {
  accessSync,
  appendFileSync,
  chmodSync,
  chownSync,
  closeSync,
  copyFileSync,
  cpSync,
  existsSync,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  lchmodSync,
  lchownSync,
  linkSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  opendirSync,
  readFileSync,
  readSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  rmdirSync,
  statSync,
  symlinkSync,
  truncateSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
  writeSync,
  promises,
  constants,
  Stats,
  Dirent,
  F_OK,
  R_OK,
  W_OK,
  X_OK,
} = fs;

const cb = fs.callbacks;
export const access = cb.access;
export const appendFile = cb.appendFile;
export const chmod = cb.chmod;
export const chown = cb.chown;
export const copyFile = cb.copyFile;
export const cp = cb.cp;
export const lchmod = cb.lchmod;
export const lchown = cb.lchown;
export const link = cb.link;
export const lstat = cb.lstat;
export const lutimes = cb.lutimes;
export const mkdir = cb.mkdir;
export const mkdtemp = cb.mkdtemp;
export const open = cb.open;
export const opendir = cb.opendir;
export const readdir = cb.readdir;
export const readFile = cb.readFile;
export const readlink = cb.readlink;
export const realpath = cb.realpath;
export const rename = cb.rename;
export const rm = cb.rm;
export const rmdir = cb.rmdir;
export const stat = cb.stat;
export const symlink = cb.symlink;
export const truncate = cb.truncate;
export const unlink = cb.unlink;
export const utimes = cb.utimes;
export const writeFile = cb.writeFile;
export const close = cb.close;
export const fstat = cb.fstat;
export const ftruncate = cb.ftruncate;
export const fsync = cb.fsync;
export const fdatasync = cb.fdatasync;
export const exists = cb.exists;
export const read = cb.read;
export const write = cb.write;

const all = { ...fs, ...cb };
delete all.callbacks;
delete all.normalizeEncoding;
delete all.FileHandle;
export default all;
