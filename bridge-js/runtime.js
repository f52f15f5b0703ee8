// The whole program of a tool_search_code child. Node built-ins only, no dependencies.
//
// The Rust parent starts Node with the permission model on and nothing granted, an empty
// environment, an empty working directory and OS barriers (network namespace, Landlock,
// seccomp, rlimits), and passes this file inline with -e, or starts Node from a startup
// snapshot whose deserialize-main function is this file (src/sandbox/snapshot.rs: built at
// first use with the same V8 flags, since any V8 flag costs Node its code cache); either way
// no file grant is needed, and vm and the context below are made after start. The
// parent also owns the clock: at the deadline it kills this process group, whatever runs
// here. What this file adds is the innermost layer: the model's code runs in a vm context
// that holds nothing of this (outer) realm, and talks to the parent only through JSON
// strings.
//
// The channel is fd 3, a socketpair end the parent put there before exec (blocking on this
// side). It carries one JSON object per line ("frames"). Frames are written whole with
// blocking writes and read by this process's own loop below, without Node's net streams:
// making a socket around the fd took ~1 ms at every start, and its write queue grew
// without bound in the child. stdout and stderr are not used for the protocol: guest
// code could write to them, and so could Node itself.
//
//   parent -> child: {"type":"run","code","limits":{...}}
//                    {"type":"bridge-result","id","ok":true,"value"} | {..."ok":false,"error":{code,message}}
//   child -> parent: {"type":"ready"}
//                    {"type":"log","level":"log"|"warn"|"error","items":[string...]}
//                    {"type":"bridge","id","method":"search"|"describe"|"call","args":[...]}
//                    {"type":"result","ok":true,"value"} | {"type":"result","ok":false,"error":{code,message,line?}}
//
// Every limit is enforced again by the parent, which treats each frame as untrusted: this
// file is a convenience layer, not the boundary.
'use strict';

// Ready first: what follows (the guest's context and its bootstrap, ~1 ms) happens while
// the parent sends the run. No frame is read before this file has set everything up: the
// first read is its last statement.
const fs = require('fs');
const CHANNEL = 3;
fs.writeSync(CHANNEL, '{"type":"ready"}\n');

const vm = require('vm');

// Outer-realm primordials, captured before anything else runs.
const JSONStringify = JSON.stringify;
const JSONParse = JSON.parse;
const StringCtor = String;

let limits = {
  maxResultBytes: 1024 * 1024,
  maxLogBytes: 64 * 1024,
  maxLogLines: 200,
  maxBridgeCalls: 64,
  maxArgBytes: 64 * 1024,
};

const ObjectKeys = Object.keys;
const ObjectCreate = Object.create;
const ArrayIsArray = Array.isArray;

// Frames carry only well-formed strings: a lone surrogate (half an emoji, cut by a slice)
// would be sent as a \ud800 escape, which the parent's JSON parser refuses. It becomes
// U+FFFD instead, in values and in keys alike: a replacer sees each object before its
// keys are written, so one whose keys are not all well formed is written as a copy whose
// keys are (a key cut from a title once ended the whole run as `protocol`, review 11).
function wellFormed(key, value) {
  if (typeof value === 'string') return value.toWellFormed();
  if (value === null || typeof value !== 'object' || ArrayIsArray(value)) return value;
  const keys = ObjectKeys(value);
  for (let i = 0; i < keys.length; i++) {
    if (keys[i].isWellFormed()) continue;
    // No prototype: a key `__proto__` stays a key.
    const copy = ObjectCreate(null);
    for (let j = 0; j < keys.length; j++) copy[keys[j].toWellFormed()] = value[keys[j]];
    return copy;
  }
  return value;
}

// A frame goes out whole or not at all: callers check first that the stack has room for
// all of this (see roomy()), and a blocking write only returns short when interrupted, so
// the loop finishes what it began. A child that writes faster than the parent reads waits
// here, instead of queueing without bound. A channel that fails means the parent is gone.
function send(frame) {
  sendText(JSONStringify(frame, wellFormed));
}

// A frame already written as JSON text (see json()).
function sendText(text) {
  const out = Buffer.from(text + '\n', 'utf8');
  let done = 0;
  while (done < out.length) {
    try {
      done += fs.writeSync(CHANNEL, out, done, out.length - done);
    } catch (e) {
      // Not the channel's fault (no room after all) and nothing written: not sent.
      if (done === 0 && !(e && typeof e.syscall === 'string')) throw e;
      if (e.code !== 'EAGAIN' && e.code !== 'EINTR') process.exit(70);
    }
  }
}

// Guest code chooses how deep the stack is when it logs or calls the bridge. An overflow
// in the middle of the host's work (counting a call, writing the frame through Node's
// streams) would leave it half done: a bridge call sent but reported failed to the guest
// (which would retry it), a log counted but never sent, or a socket stream left
// half-updated. So hostCall first makes sure there is room for all of its work, and refuses
// before doing any of it otherwise: the probe below recurses through frames at least as
// large as the host's own (eight arguments each), and either returns or overflows here.
const HEADROOM_FRAMES = 600;
function headroom(n, a, b, c, d, e, f, g, h) {
  return n === 0 ? 0 : headroom(n - 1, a, b, c, d, e, f, g, h) + 1;
}
function roomy() {
  try {
    return headroom(HEADROOM_FRAMES, 1, 2, 3, 4, 5, 6, 7, 8) === HEADROOM_FRAMES;
  } catch (e) {
    return false;
  }
}
const TOO_DEEP = 'the stack is too deep to call the host here: call it from a shallower frame';

// What the parent counts: UTF-8 bytes, not UTF-16 units.
function bytes(text) {
  return Buffer.byteLength(text, 'utf8');
}

// A value as the frame will carry it. The guest's JSON text is parsed here and written
// again, and the two need not be the same size: the guest's JSON.rawJSON('1e20') is 4
// bytes and 21 once written here (review 23 F1). Bounds are checked on this text, the
// one that is sent, so a value within them is never a frame the parent must refuse.
function json(value) {
  return JSONStringify(value, wellFormed);
}

// The parent's JSON parser refuses values nested deeper than 128; refuse them here first,
// with a clear message, walking without recursion.
const MAX_DEPTH = 100;
function tooDeep(value) {
  const stack = [[value, 1]];
  while (stack.length > 0) {
    const [v, depth] = stack.pop();
    if (depth > MAX_DEPTH) return true;
    if (v !== null && typeof v === 'object') {
      for (const key of Object.keys(v)) stack.push([v[key], depth + 1]);
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------------
// The context. Code generation from strings and wasm are off in it, so `eval`, `Function`
// and `WebAssembly.compile` are refused inside (the context-level setting wins over the
// process-wide flag, which the parent also sets: see "The outer realm" below). Nothing of
// this realm is put on it: the bootstrap below runs inside the context and creates every
// global the guest sees from inner-realm objects, so constructor chains
// (`x.constructor.constructor('return process')()`) only ever reach the inner Function,
// which cannot compile strings.
//
// DONT_CONTEXTIFY: the guest's globalThis is an ordinary object of its own realm, not an
// outer "sandbox" object behind interceptors. With an outer sandbox object, a setter the
// guest defines on its global ran with that outer object as `this`, and Node's own code
// read the guest's globals (`Error`) through it.
// ---------------------------------------------------------------------------------------
const context = vm.createContext(vm.constants.DONT_CONTEXTIFY, {
  name: 'tool_search_code',
  codeGeneration: { strings: false, wasm: false },
});

// Runs inside the context. Receives one outer function, `host`, and keeps it in this
// closure: the guest never gets a reference to it (a reference would be an outer-realm
// function, whose constructor is the outer Function). `host` takes and returns only
// primitives and never throws (see hostCall below), so no outer object or error can cross
// back. Everything the bootstrap needs later (JSON, Promise, then, freeze) is captured
// here, before the guest can replace any of it.
const BOOTSTRAP = `(function bootstrap(host, hooked) {
  'use strict';
  const stringify = JSON.stringify;
  const parse = JSON.parse;
  const P = Promise;
  const then = Promise.prototype.then;
  const resolveP = Promise.resolve;
  const apply = Reflect.apply;
  const freeze = Object.freeze;
  const defineProperty = Object.defineProperty;
  const getOwn = Object.getOwnPropertyDescriptor;
  const hasOwn = Object.hasOwn;
  const getProto = Object.getPrototypeOf;
  // The standard error prototypes and their names, as they were before any guest code.
  const knownNames = [];
  for (const C of [Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError, AggregateError]) {
    knownNames.push([C.prototype, C.name]);
  }
  const rejectP = Promise.reject;
  const hasInstance = Function.prototype[Symbol.hasInstance];
  const weakGet = WeakMap.prototype.get;
  const weakSet = WeakMap.prototype.set;
  const WeakMapCtor = WeakMap;
  // The guest's line of each error whose stack prepare() formatted (see fail()).
  const guestLines = new WeakMapCtor();

  // \`x instanceof Error\` would call a Symbol.hasInstance the guest defined on Error (and
  // a Proxy's traps): the captured ordinary check, which never throws out of here.
  function isError(x) {
    try { return apply(hasInstance, ErrorCtor, [x]) === true; } catch (e) { return false; }
  }
  const ErrorCtor = Error;
  const StringCtor = String;
  const isArray = Array.isArray;
  const pending = Object.create(null);

  // Every call into the outer side goes through here. \`host\` never throws by itself, but a
  // call made with the stack nearly exhausted overflows at its entry, before its own
  // try/catch, and that RangeError belongs to the outer realm: its constructor chain leads
  // to the outer Function. It is caught here, never looked at, and replaced by an error of
  // this realm, so no outer object reaches the guest.
  function callHost(a, b, c, d) {
    try {
      return host(a, b, c, d);
    } catch (outer) {
      throw new ErrorCtor('the host call failed');
    }
  }

  function safeStringify(value) {
    try {
      const s = stringify(value);
      return s === undefined ? 'null' : s;
    } catch (e) {
      return null;
    }
  }

  function format(item) {
    if (typeof item === 'string') return item;
    if (isError(item)) {
      try { return StringCtor(item.stack || item.message); } catch (e) { return 'Error'; }
    }
    const s = safeStringify(item);
    if (s !== null) return s;
    try { return StringCtor(item); } catch (e) { return '[unprintable]'; }
  }

  function makeLogger(level) {
    return function () {
      let line = '';
      for (let i = 0; i < arguments.length; i++) {
        if (i > 0) line += ' ';
        line += format(arguments[i]);
      }
      callHost('log', level, line);
    };
  }

  // A bridge call starts only when awaited or .then-ed: an unawaited call never reaches
  // the parent, so it never runs a tool.
  // The call is sent last, once everything that can fail has been done (the promise, the
  // derived promise of .then(), which may run a guest's Promise[Symbol.species]): a failure
  // before the send means nothing was sent, and the guest hears of it; after the send
  // nothing is left that can fail, so a call that ran is never reported as failed.
  function lazy(method, args) {
    const json = safeStringify(args);
    let promise = null;
    let settle = null;
    let sent = false;
    const ensure = function () {
      if (promise === null) {
        promise = new P(function (resolve, reject) { settle = { __proto__: null, resolve: resolve, reject: reject }; });
      }
      return promise;
    };
    const dispatch = function () {
      if (sent) return;
      let id = null;
      if (json === null) {
        id = 'openclaw.tools.' + method + ': arguments are not JSON-serializable';
      } else {
        // callHost throws only when the host could not even start (nothing was sent).
        try { id = callHost('bridge', method, json); } catch (e) { id = 'the stack is too deep to call the host here'; }
      }
      sent = true;
      if (typeof id === 'number') {
        pending[id] = settle;
      } else {
        settle.reject(new ErrorCtor(typeof id === 'string' ? id : 'bridge unavailable'));
      }
    };
    const chain = function (onOk, onErr) {
      const derived = apply(then, ensure(), [onOk, onErr]);
      dispatch();
      return derived;
    };
    return freeze({
      __proto__: null,
      then: function (onOk, onErr) { return chain(onOk, onErr); },
      catch: function (onErr) { return chain(undefined, onErr); },
    });
  }

  const tools = freeze({
    __proto__: null,
    search: function search(query, options) {
      const limit = options !== null && typeof options === 'object' ? options.limit : undefined;
      return lazy('search', [query, limit === undefined ? null : limit]);
    },
    describe: function describe(id) { return lazy('describe', [id]); },
    call: function call(id, args) { return lazy('call', [id, args === undefined ? {} : args]); },
  });
  const openclaw = freeze({ __proto__: null, tools: tools });
  const console = freeze({
    __proto__: null,
    log: makeLogger('log'),
    info: makeLogger('log'),
    warn: makeLogger('warn'),
    error: makeLogger('error'),
  });
  defineProperty(globalThis, 'openclaw', { __proto__: null, value: openclaw, writable: false, configurable: false, enumerable: false });
  defineProperty(globalThis, 'console', { __proto__: null, value: console, writable: false, configurable: false, enumerable: false });

  // Called by the outer side with primitives only; parses inside this realm. The guest may
  // have polluted this realm's prototypes by now, so nothing here reads through them: the
  // descriptor and the pending entry have no prototype, the answer's message and code are
  // read as own data properties (an inherited getter would run guest code here, and a
  // throwing one would leave this function), and the whole is guarded, because an
  // exception out of here would unwind the outer frame handler and drop the frames after
  // this one. Resolving a promise may still run a guest's \`then\` getter: resolve never
  // throws, it rejects instead.
  function deliver(id, ok, json) {
    try {
      const entry = pending[id];
      if (entry === undefined) return;
      delete pending[id];
      let value = null;
      try { value = parse(json); } catch (e) { ok = false; value = null; }
      if (ok) {
        entry.resolve(value);
        return;
      }
      const message = value !== null && typeof value === 'object' ? dataOf(value, 'message') : undefined;
      const code = value !== null && typeof value === 'object' ? dataOf(value, 'code') : 'protocol';
      const err = new ErrorCtor(message !== undefined ? message : code === 'protocol' ? 'bad bridge result' : 'bridge call failed');
      // defineProperty, not assignment: a guest may have put a getter-only \`code\` on
      // Object.prototype, and assigning would throw.
      if (code !== undefined) {
        defineProperty(err, 'code', { __proto__: null, value: code, writable: true, configurable: true, enumerable: false });
      }
      entry.reject(err);
    } catch (e) {}
  }

  // finish() and fail() run guest code (getters, toJSON, toString) and may not throw: a
  // throw here would reject a promise nobody handles, and the run would end as a timeout.
  function finish(value) {
    let json = null;
    try {
      if (value === undefined) value = null;
      if (isError(value)) value = StringCtor(value.message);
      json = safeStringify(value);
    } catch (e) {
      json = null;
    }
    if (json === null) {
      callHost('error', 'code-error', 'the return value is not JSON-serializable', 0);
    } else {
      callHost('result', json);
    }
  }

  // The line is the one prepare() saw in the guest's first frame, never text parsed out
  // of the stack (which starts with the guest's own message).
  function fail(error) {
    let message = 'error';
    let line = 0;
    try {
      if (isError(error)) {
        message = StringCtor(error.message);
        StringCtor(error.stack || '');
        const seen = apply(weakGet, guestLines, [error]);
        if (typeof seen === 'number') line = seen;
      } else {
        message = format(error);
      }
    } catch (e) { message = 'error'; }
    callHost('error', 'code-error', message, line);
  }

  // Runs the compiled body. The captured original then collects the result, so a guest
  // that replaces Promise.prototype.then cannot hang or fool the collection.
  function start(body) {
    if (typeof body !== 'function') {
      callHost('error', 'code-error', 'the code did not compile to a function body', 0);
      return;
    }
    let result;
    try {
      result = body();
      // The captured resolve and then: a guest that replaced Promise.resolve or
      // Promise.prototype.then cannot choose what is collected, nor break collection.
      apply(then, apply(resolveP, P, [result]), [finish, fail]);
    } catch (e) {
      fail(e);
    }
  }

  // An inner error, for the outer side to reject with (import() and the like).
  function error(message) {
    return new ErrorCtor(StringCtor(message));
  }

  // -------------------------------------------------------------------------------------
  // The isolate's callbacks. V8 and Node call a few JavaScript functions on the guest's
  // behalf: Node's prepareStackTrace callback when an error's .stack is first read (also
  // after Error.captureStackTrace), and Node's import() machinery. Those were outer-realm
  // functions: when the guest had nearly exhausted the stack, they overflowed on entry and
  // the RangeError, an outer-realm object, was thrown into the guest (its constructor chain
  // reached the outer Function). The outer side installs the two functions below as the
  // isolate's callbacks instead, so whatever they throw, even on entry, is of this realm.
  //
  // prepare() formats every error of the process, the outer side's too, so it uses only
  // what was captured above and calls nothing the guest can replace; it never hands the
  // error or the call sites to anyone (the guest's own Error.prepareStackTrace is never
  // called: no call site ever reaches the guest). It lists the guest's frames only.
  // No guest code may run inside prepare(): V8 formats a stack read while another is being
  // formatted with its own formatter, which lists every frame (the runtime's, Node's, and
  // the paths of this host's files). So the heading is built from own data properties and
  // the standard prototypes captured above, never by calling toString or a getter. The
  // error itself is an ordinary object (V8 captures stacks only on those), so reading its
  // own descriptors and its prototype runs no trap; its prototype is only compared, never
  // read, since it may be a guest's Proxy.
  // A descriptor is an object of this realm: reading a \`value\` it does not have itself
  // (an accessor's descriptor) would run a getter the guest put on Object.prototype.
  function dataOf(object, key) {
    const d = getOwn(object, key);
    return d !== undefined && hasOwn(d, 'value') && typeof d.value === 'string' ? d.value : undefined;
  }
  function heading(error) {
    let name = dataOf(error, 'name');
    if (name === undefined) {
      const proto = getProto(error);
      name = 'Error';
      for (let i = 0; i < knownNames.length; i++) {
        if (knownNames[i][0] === proto) { name = knownNames[i][1]; break; }
      }
    }
    const message = dataOf(error, 'message');
    return message === undefined || message === '' ? name : name + ': ' + message;
  }
  function prepare(globalOfError, error, trace) {
    let text;
    try { text = heading(error); } catch (e) { text = 'Error'; }
    try {
      for (let i = 0; i < trace.length; i++) {
        const site = trace[i];
        // Only the guest's own frames: the runtime's and Node's are noise to a model, and
        // their file names would tell it where this host keeps its cache.
        if (site.getFileName() !== 'tool_search_code.js') continue;
        const name = site.getFunctionName();
        const lineNumber = site.getLineNumber();
        if (apply(weakGet, guestLines, [error]) === undefined && typeof lineNumber === 'number') {
          try { apply(weakSet, guestLines, [error, lineNumber]); } catch (e) {}
        }
        const where = StringCtor(site.getFileName()) + ':' + StringCtor(site.getLineNumber()) + ':' + StringCtor(site.getColumnNumber());
        text += '\\n    at ' + (name ? StringCtor(name) + ' (' + where + ')' : where);
      }
    } catch (e) {}
    return text;
  }

  // Node's promise-rejection tracking ran outer code on the guest's promises (it reads
  // a symbol on each rejected one, so a Proxy in the guest's Promise.prototype chain was
  // called from outside, and could crash the child). The guest's rejections are its own
  // business: this takes Node's place and does nothing, never touching its arguments.
  function onReject() {}

  // import() answers with a rejected promise of this realm; an overflow on entry is an
  // inner RangeError, thrown by import() itself.
  function importHook() {
    return apply(rejectP, P, [new ErrorCtor('import() is not available in tool_search_code')]);
  }

  // Without the hooks (a Node whose internals the outer side cannot reach) the triggers are
  // removed instead: no error of this realm captures a stack, so .stack is undefined and
  // no callback runs (an own, non-configurable, non-number stackTraceLimit: V8 reads it
  // as a data property, so neither assignment nor one on a prototype brings stacks back);
  // import() is refused when the body is compiled (see run() outside).
  if (!hooked) {
    defineProperty(ErrorCtor, 'stackTraceLimit', { __proto__: null, value: undefined, writable: false, configurable: false, enumerable: false });
  }

  return freeze({ __proto__: null, deliver: deliver, start: start, error: error, prepare: prepare, importHook: importHook, onReject: onReject });
})`;

// ---------------------------------------------------------------------------------------
// The outer side of the boundary.
// ---------------------------------------------------------------------------------------
let nextId = 1;
let bridgeCalls = 0;
let logBytes = 0;
let logLines = 0;
let logCut = 0;
let finished = false;

// The one function the bootstrap holds. It checks the type of every argument, returns only
// numbers, strings or undefined, and catches everything: an outer-realm exception thrown
// into the context would be an escape route.
function hostCall(kind, a, b, c) {
  try {
    if (finished) return undefined;
    if (!roomy()) {
      // Nothing was done. A log line is counted as cut (a plain increment cannot
      // overflow); a bridge call is refused, so the guest's error is the truth.
      if (kind === 'log') logCut += 1;
      return kind === 'bridge' ? TOO_DEEP : undefined;
    }
    if (kind === 'log') {
      if ((a !== 'log' && a !== 'warn' && a !== 'error') || typeof b !== 'string') return undefined;
      const line = b.length > 4096 ? b.slice(0, 4096).toWellFormed() + '...' : b;
      const size = bytes(line);
      if (logLines >= limits.maxLogLines || logBytes + size > limits.maxLogBytes) {
        logCut += 1;
        return undefined;
      }
      // Counted once sent: a failed send leaves the counts as they were.
      send({ type: 'log', level: a, items: [line] });
      logLines += 1;
      logBytes += size;
      return undefined;
    }
    if (kind === 'bridge') {
      if (typeof a !== 'string' || typeof b !== 'string') return 'bad bridge call';
      if (bytes(b) > limits.maxArgBytes) return 'bridge arguments exceed ' + limits.maxArgBytes + ' bytes';
      if (bridgeCalls >= limits.maxBridgeCalls) return 'at most ' + limits.maxBridgeCalls + ' bridge calls per run';
      const args = JSONParse(b);
      if (tooDeep(args)) return 'bridge arguments are nested more than ' + MAX_DEPTH + ' levels deep';
      const argsText = json(args);
      if (bytes(argsText) > limits.maxArgBytes) return 'bridge arguments exceed ' + limits.maxArgBytes + ' bytes (' + bytes(argsText) + ' as sent)';
      // The id is taken and the call counted once the frame is out; a failed send
      // returns nothing, so the guest is told it failed exactly when it was not sent.
      const id = nextId;
      sendText('{"type":"bridge","id":' + id + ',"method":' + json(a) + ',"args":' + argsText + '}');
      nextId += 1;
      bridgeCalls += 1;
      return id;
    }
    if (kind === 'result') {
      if (typeof a !== 'string') return undefined;
      finished = true;
      flushLogCut();
      const size = bytes(a);
      if (size > limits.maxResultBytes) {
        send({ type: 'result', ok: false, error: { code: 'output-too-large', message: 'the return value is ' + size + ' bytes of JSON; the limit is ' + limits.maxResultBytes } });
        return undefined;
      }
      const value = JSONParse(a);
      if (tooDeep(value)) {
        send({ type: 'result', ok: false, error: { code: 'code-error', message: 'the return value is nested more than ' + MAX_DEPTH + ' levels deep' } });
        return undefined;
      }
      const valueText = json(value);
      const sent = bytes(valueText);
      if (sent > limits.maxResultBytes) {
        send({ type: 'result', ok: false, error: { code: 'output-too-large', message: 'the return value is ' + sent + ' bytes of JSON as sent; the limit is ' + limits.maxResultBytes } });
      } else {
        sendText('{"type":"result","ok":true,"value":' + valueText + '}');
      }
      return undefined;
    }
    if (kind === 'error') {
      finished = true;
      flushLogCut();
      const message = typeof b === 'string' ? b.slice(0, 4096) : 'error';
      const error = { code: a === 'code-error' ? 'code-error' : 'code-error', message: message };
      if (typeof c === 'number' && Number.isSafeInteger(c) && c > 0) error.line = c;
      send({ type: 'result', ok: false, error: error });
      return undefined;
    }
    return undefined;
  } catch (e) {
    // Nothing after the send can throw, so a throw here means nothing was sent.
    return kind === 'bridge' ? TOO_DEEP : undefined;
  }
}

function flushLogCut() {
  if (logCut > 0) {
    send({ type: 'log', level: 'warn', items: ['[' + logCut + ' more console lines cut: the limit is ' + limits.maxLogLines + ' lines or ' + limits.maxLogBytes + ' bytes]'] });
    logCut = 0;
  }
}

// ---------------------------------------------------------------------------------------
// The outer realm. The parent starts Node with --disallow-code-generation-from-strings, so
// even a guest that got hold of an outer Function could not compile anything with it, and
// with --expose-internals, used only here: once, to make the bootstrap's inner functions
// the isolate's prepareStackTrace and import() callbacks (see the bootstrap). Where that
// API is missing, the bootstrap removes the triggers instead (no stacks, no import()).
// ---------------------------------------------------------------------------------------
let internals = null;
try {
  internals = require('internal/test/binding').internalBinding;
} catch (e) {
  internals = null;
}
const hooked = internals !== null
  && typeof internals('errors').setPrepareStackTraceCallback === 'function'
  && typeof internals('module_wrap').setImportModuleDynamicallyCallback === 'function'
  && typeof internals('task_queue').setPromiseRejectCallback === 'function';
const inner = new vm.Script(BOOTSTRAP, { filename: 'bootstrap.js' }).runInContext(context)(hostCall, hooked);
if (hooked) {
  internals('errors').setPrepareStackTraceCallback(inner.prepare);
  internals('module_wrap').setImportModuleDynamicallyCallback(inner.importHook);
  internals('task_queue').setPromiseRejectCallback(inner.onReject);
}
internals = null;

// Without the hooks, import() must never run: `import` is a keyword, so a body can only
// ever call it by writing the word. A body with the word is compiled once more with each
// occurrence replaced by `#mport` (same length, no quote, slash or newline: strings,
// comments, templates and regular expressions parse the same, while `#mport(` is a syntax
// error wherever it is code). If that fails where the body itself compiles, the word was
// code, and the body is refused.
function usesImport(code) {
  const word = /(?<![A-Za-z0-9_$])import(?![A-Za-z0-9_$])/g;
  if (!word.test(code)) return false;
  const wrap = (text) => '(async function tool_search_code() {\n' + text + '\n})';
  try {
    new vm.Script(wrap(code.replace(word, '#mport')));
    return false;
  } catch (e) {
    try { new vm.Script(wrap(code)); } catch (e2) { return false; }
    return true;
  }
}

function run(frame) {
  if (frame.limits && typeof frame.limits === 'object') {
    for (const key of Object.keys(limits)) {
      if (typeof frame.limits[key] === 'number') limits[key] = frame.limits[key];
    }
  }
  if (typeof frame.code !== 'string') {
    hostCall('error', 'code-error', 'no code', 0);
    return;
  }
  if (!hooked && usesImport(frame.code)) {
    hostCall('error', 'code-error', 'import() is not available in tool_search_code (for a property named import, write obj["import"])', 0);
    return;
  }
  let body;
  try {
    // The body becomes an async function. A body that closes the wrapper early
    // (`}); ... (function(){`) only reshapes code that runs in the same context anyway;
    // whatever the script evaluates to is checked by start().
    const script = new vm.Script('(async function tool_search_code() {\n' + frame.code + '\n})', {
      filename: 'tool_search_code.js',
      lineOffset: -1,
      // A belt: the isolate's import() callback (or, without it, the refusal above) answers
      // first. Without any of them, import() rejected with an error of this (outer) realm,
      // whose constructor chain reached the outer Function.
      importModuleDynamically: () => {
        throw inner.error('import() is not available in tool_search_code');
      },
    });
    // No `timeout`: it starts a watchdog thread for every run (0.25 ms of a 1.3 ms run),
    // and the parent's kill at the deadline already ends a body that never returns here.
    body = script.runInContext(context, { displayErrors: false });
  } catch (e) {
    let message = 'a syntax error';
    try { message = StringCtor(e.message); } catch (e2) { message = 'a syntax error'; }
    hostCall('error', 'code-error', 'the code does not compile: ' + message, 0);
    return;
  }
  inner.start(body);
}

// Frames in. Lines are cut at the newline byte (never part of a multi-byte UTF-8
// sequence) and decoded whole; the bytes of a line not yet ended are kept as a list of
// chunks, and only a new chunk is searched, so a large body is not read quadratically.
let partial = [];
const lines = [];
function take(chunk) {
  let start = 0;
  let nl = chunk.indexOf(10);
  while (nl >= 0) {
    partial.push(chunk.subarray(start, nl));
    lines.push(Buffer.concat(partial).toString('utf8'));
    partial = [];
    start = nl + 1;
    nl = chunk.indexOf(10, start);
  }
  if (start < chunk.length) partial.push(chunk.subarray(start));
}

// Each frame on its own: whatever one does (a guest getter run while its answer is
// delivered), the frames after it are still handled.
function handle() {
  while (lines.length > 0) {
    const line = lines.shift();
    try {
      const frame = JSONParse(line);
      if (frame.type === 'run') {
        run(frame);
      } else if (frame.type === 'bridge-result' && typeof frame.id === 'number') {
        const payload = frame.ok ? frame.value : frame.error;
        inner.deliver(frame.id, frame.ok === true, JSONStringify(payload === undefined ? null : payload));
      }
    } catch (e) {}
  }
}

const CHUNK = 64 * 1024;
function readFailed(e) {
  if (e.code !== 'EAGAIN' && e.code !== 'EINTR') process.exit(70);
}

// Answers to bridge calls, as they come, on Node's loop (a read that ends the channel ends
// the process: the parent is gone). Each chunk is a new buffer: unfinished lines keep
// views into it. Not a blocking read on the loop's own thread, though that saves a pool
// thread's wake-up per answer (a 35% faster round trip): the guest's one timer,
// `Atomics.waitAsync` with a timeout, is a task the loop must be free to run, and a
// blocked loop turned a 50 ms wait into the run's timeout (sandbox round 33 F1).
function readOn() {
  const chunk = Buffer.allocUnsafe(CHUNK);
  fs.read(CHANNEL, chunk, 0, CHUNK, null, (e, n) => {
    if (e) {
      readFailed(e);
    } else if (n === 0) {
      process.exit(0);
    } else {
      take(chunk.subarray(0, n));
      handle();
    }
    readOn();
  });
}

// The guest's own unhandled rejections (a fire-and-forget async helper that throws) are its
// business: Node's default would end the process and lose the run. They are ignored (the
// reason, a guest object, is never touched). Anything else uncaught ends the run as a code
// error: a throw from a guest callback that no await of the body is under (a
// FinalizationRegistry cleanup), or a fault of this file. The message says where to look
// (it said only "an uncaught exception", which read as the runtime's own failure).
process.on('unhandledRejection', () => {});
process.on('uncaughtException', () => {
  hostCall('error', 'code-error', 'an exception was thrown where the body could not catch it (a FinalizationRegistry cleanup callback, say) and ended the run', 0);
});

// The run, last: read with a blocking read (a spare waits here until it is given one; the
// parent sends nothing else first), then started at once, without a turn of the event
// loop. The reader for the answers starts after the body's first synchronous part and its
// microtasks (a body that returns at once is answered before it exists).
while (lines.length === 0) {
  const chunk = Buffer.allocUnsafe(CHUNK);
  let n = -1;
  try {
    n = fs.readSync(CHANNEL, chunk, 0, CHUNK, null);
  } catch (e) {
    readFailed(e);
  }
  if (n === 0) process.exit(0);
  if (n > 0) take(chunk.subarray(0, n));
}
handle();
setImmediate(readOn);
