// node:url
import { URL, URLSearchParams, fileURLToPath, pathToFileURL } from 'ac:url';
export { URL, URLSearchParams, fileURLToPath, pathToFileURL };
export default { URL, URLSearchParams, fileURLToPath, pathToFileURL };
