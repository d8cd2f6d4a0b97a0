// node:events
import { EventEmitter, once } from 'ac:events';
EventEmitter.EventEmitter = EventEmitter;
EventEmitter.once = once;
export { EventEmitter, once };
export default EventEmitter;
