import path from 'ac:path';
export * from 'ac:path';
export default path;
