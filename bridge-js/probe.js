// The escape probe of `toolsearch doctor`: run in a child started exactly as for a
// tool_search_code run (permission model, empty environment, every OS barrier), but
// without the vm context, as if the guest had escaped it. It tries what an escaped guest
// would try and reports each attempt on fd 3 as {name: "blocked" | "allowed: ..."}.
// argv[1]: {"tcp": port, "udp": port, "unix": path} of listeners the parent opened.
'use strict';
const net = require('net');
const dgram = require('dgram');
const dns = require('dns');
const fs = require('fs');
const child = require('child_process');

const target = JSON.parse(process.argv[1]);
const results = {};
const attempt = (name, fn) => {
  try {
    const detail = fn();
    results[name] = 'allowed: ' + String(detail).slice(0, 80);
  } catch (e) {
    results[name] = 'blocked (' + (e && (e.code || e.message)) + ')';
  }
};
const attemptAsync = (name, fn) => new Promise((resolve) => {
  let done = false;
  const finish = (value) => { if (!done) { done = true; results[name] = value; resolve(); } };
  setTimeout(() => finish('blocked (no answer in 1500 ms)'), 1500);
  try {
    fn((detail) => finish('allowed: ' + String(detail).slice(0, 80)), (e) => finish('blocked (' + (e && (e.code || e.message)) + ')'));
  } catch (e) {
    finish('blocked (' + (e && (e.code || e.message)) + ')');
  }
});

attempt('read a file', () => fs.readFileSync('/etc/hostname', 'utf8').trim());
attempt('write a file', () => { fs.writeFileSync('probe-write-test', 'x'); return 'wrote probe-write-test'; });
attempt('spawn a process', () => child.execFileSync('/bin/true') && 'ran /bin/true');
attempt('signal the parent', () => { process.kill(process.ppid, 0); return 'kill(parent, 0) succeeded'; });

Promise.all([
  attemptAsync('TCP connect to loopback', (ok, fail) => {
    const s = net.connect(target.tcp, '127.0.0.1', () => { ok('connected'); s.destroy(); });
    s.on('error', fail);
  }),
  attemptAsync('UDP send to loopback', (ok, fail) => {
    const s = dgram.createSocket('udp4');
    s.on('error', fail);
    s.send(Buffer.from('probe'), target.udp, '127.0.0.1', (e) => { s.close(); e ? fail(e) : ok('sent'); });
  }),
  attemptAsync('Unix socket connect', (ok, fail) => {
    const s = net.connect(target.unix, () => { ok('connected'); s.destroy(); });
    s.on('error', fail);
  }),
  attemptAsync('resolve a name', (ok, fail) => {
    dns.lookup('localhost', (e, address) => (e ? fail(e) : ok(address)));
  }),
]).then(() => {
  const out = new net.Socket({ fd: 3, readable: false, writable: true });
  out.end(JSON.stringify(results) + '\n', () => process.exit(0));
});
