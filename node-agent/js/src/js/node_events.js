// node:events
import native from 'ac:native';
const { EventEmitter, once } = native.require('ac:events');
EventEmitter.EventEmitter = EventEmitter;
EventEmitter.once = once;
export { EventEmitter, once };
export default EventEmitter;
