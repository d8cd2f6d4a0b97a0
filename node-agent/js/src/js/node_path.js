// node:path
import native from 'ac:native';
const path = native.require('ac:path').default;
export const { sep, delimiter, isAbsolute, normalize, join, resolve, relative, dirname, basename, extname, parse, format, toNamespacedPath, matchesGlob, posix, win32 } = path;
export default path;
