// node:url
import native from 'ac:native';
const { URL, URLSearchParams, fileURLToPath, pathToFileURL } = native.require('ac:url');
export { URL, URLSearchParams, fileURLToPath, pathToFileURL };
export default { URL, URLSearchParams, fileURLToPath, pathToFileURL };
