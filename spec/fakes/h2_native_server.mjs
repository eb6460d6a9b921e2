// HTTP/2 servers on loopback for spec/engine/http2_native_spec.lua, on node's own http2 module (not
// nghttp2: an independent implementation of the protocol), one over TLS (ALPN h2 only) and one
// cleartext (prior knowledge), with the same routes, so that both of cseng.http's HTTP/2 paths
// (engine/h2.c and libcurl) meet the same replies.
//
//   node h2_native_server.mjs PORTFILE CERT KEY
//     -> writes {"tls": port, "plain": port} to PORTFILE once both listen
//
// Routes (the path; the query where said):
//   /cl             "hello", content-length          /nolength   a body without content-length
//   /headers        set-cookie twice, x-empty "", x-multi "a", "b"
//   /trailers       "body", then trailers x-t: done, x-u: 42
//   /trailers-only  a gRPC-style answer: one header block that ends the stream (grpc-status 5)
//   /big            5 MiB in 64 KiB writes           /stream     5 chunks, 50 ms apart
//   /204 /304       no body                          /head       content-length 1234, no body (any method)
//   /echo-raw       the request as received: {headers (pseudo-headers too, names as sent), body (hex)}
//   /slow?id=X      answers after 3 s; /slow-state?id=X says "pending" or "answered"
//   /hold           "held" after 100 ms              /early-hints  a 103, then 200 "done"
//   /rst            the stream reset (INTERNAL_ERROR) before any answer
//   /rst-after-headers  a 200's headers, then the stream reset
//   /close-after    "bye", then the session closed (GOAWAY): the next request takes a new connection
//   /destroy        the connection dropped before an answer
//   /bigheaders     40 KiB of response headers       /stats      {sessions, streams}
//   /pair?id=X&n=1|2&done=FILE, /pair-go?id=X  held until all three are in; then go is answered
//                   "go", 100 ms later n=1, then, once its stream has closed and 20 ms more, n=2;
//                   once that one has closed and 20 ms more, FILE is written
import http2 from 'node:http2';
import fs from 'node:fs';

const [portfile, cert, key] = process.argv.slice(2);
let sessions = 0, streams = 0;
const slow = new Map();
const pairs = new Map(); // id -> {1: answer, 2: answer, go, done}

// A pair whose two streams and go are all in: its answers one after the other, each on the
// wire before the next is begun (see /pair above).
function pairGo(id) {
  const p = pairs.get(id);
  if (!p || !p[1] || !p[2] || !p.go || p.started) return;
  p.started = true;
  p.go(); // the client stops reading once it has this answer
  const later = (ms, f) => setTimeout(f, ms);
  later(100, () => p[1](() => later(20, () => p[2](() => later(20, () => fs.writeFileSync(p.done, 'sent'))))));
}

function onStream(stream, headers, flags, rawHeaders) {
  streams++;
  const url = new URL(headers[':path'], 'http://x');
  const q = url.searchParams;
  const chunks = [];
  stream.on('error', () => {});
  stream.on('data', (c) => chunks.push(c));
  stream.on('end', () => {
    const body = Buffer.concat(chunks);
    const ok = (h, b) => { if (!stream.destroyed) { stream.respond(h); stream.end(b); } };
    switch (url.pathname) {
      case '/cl': ok({ ':status': 200, 'content-type': 'text/plain', 'content-length': '5' }, 'hello'); break;
      case '/nolength': ok({ ':status': 200 }, 'streamed body'); break;
      case '/headers':
        ok({ ':status': 200, 'set-cookie': ['a=1; Path=/', 'b=2'], 'x-empty': '', 'x-multi': ['a', 'b'] }, 'ok');
        break;
      case '/trailers':
        stream.respond({ ':status': 200 }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'x-t': 'done', 'x-u': '42' }));
        stream.end('body');
        break;
      case '/trailers-only':
        stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '5', 'grpc-message': 'not%20found' },
          { endStream: true });
        break;
      case '/big': {
        stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' });
        const piece = Buffer.alloc(64 * 1024);
        let i = 0;
        const more = () => {
          while (i < 80) {
            piece.fill(65 + (i % 26));
            i++;
            if (!stream.write(Buffer.from(piece))) { stream.once('drain', more); return; }
          }
          stream.end();
        };
        more();
        break;
      }
      case '/stream': {
        stream.respond({ ':status': 200, 'content-type': 'text/plain' });
        let k = 0;
        const next = () => {
          if (stream.destroyed) return;
          k++;
          stream.write(`part ${k};`);
          if (k < 5) setTimeout(next, 50);
          else stream.end();
        };
        next();
        break;
      }
      case '/204': ok({ ':status': 204, 'x-kind': 'none' }); break;
      case '/304': ok({ ':status': 304, etag: '"v1"' }); break;
      case '/head': ok({ ':status': 200, 'content-length': '1234', 'content-type': 'text/plain' }); break;
      case '/echo-raw': {
        const raw = [];
        for (let j = 0; j < rawHeaders.length; j += 2) raw.push([rawHeaders[j], rawHeaders[j + 1]]);
        const s = JSON.stringify({ headers: raw, body: body.toString('hex') });
        ok({ ':status': 200, 'content-type': 'application/json' }, s);
        break;
      }
      case '/slow': {
        const id = q.get('id');
        slow.set(id, 'pending');
        setTimeout(() => { slow.set(id, 'answered'); ok({ ':status': 200 }, 'late'); }, 3000);
        break;
      }
      case '/slow-state': ok({ ':status': 200 }, slow.get(q.get('id')) || 'unknown'); break;
      case '/hold': setTimeout(() => ok({ ':status': 200 }, 'held'), 100); break;
      case '/pair': case '/pair-go': {
        const id = q.get('id');
        const p = pairs.get(id) || {};
        pairs.set(id, p);
        if (url.pathname === '/pair-go') {
          p.go = () => ok({ ':status': 200 }, 'go');
        } else {
          const n = q.get('n');
          p.done = q.get('done');
          p[n] = (closed) => { stream.on('close', closed); ok({ ':status': 200 }, 'answer ' + n); };
        }
        pairGo(id);
        break;
      }
      case '/early-hints':
        stream.additionalHeaders({ ':status': 103, link: '</a.css>; rel=preload' });
        setTimeout(() => ok({ ':status': 200, 'x-final': 'yes' }, 'done'), 20);
        break;
      case '/rst': stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR); break;
      case '/rst-after-headers':
        stream.respond({ ':status': 200 });
        stream.write('part');
        setTimeout(() => stream.destroy(new Error('reset mid-body')), 20); // RST_STREAM INTERNAL_ERROR
        break;
      case '/close-after':
        ok({ ':status': 200 }, 'bye');
        setTimeout(() => stream.session && stream.session.close(), 20);
        break;
      case '/destroy': stream.session.destroy(); break;
      case '/bigheaders':
        ok({ ':status': 200, 'x-big-1': 'a'.repeat(20 * 1024), 'x-big-2': 'b'.repeat(20 * 1024) }, 'ok');
        break;
      case '/stats': ok({ ':status': 200, 'content-type': 'application/json' }, JSON.stringify({ sessions, streams })); break;
      default: ok({ ':status': 404 }, 'no such');
    }
  });
}

const opts = { settings: { maxConcurrentStreams: 1000 }, maxSessionMemory: 100 };
const tlsServer = http2.createSecureServer({ ...opts, cert: fs.readFileSync(cert), key: fs.readFileSync(key) });
const plainServer = http2.createServer(opts);
for (const s of [tlsServer, plainServer]) {
  s.on('session', (sess) => { sessions++; sess.on('error', () => {}); });
  // each write on the wire at once, as a provider's would be (no Nagle: /pair's answers apart)
  s.on('connection', (sock) => sock.setNoDelay(true));
  s.on('stream', onStream);
  s.on('sessionError', () => {});
}
let listening = 0;
const ready = () => {
  if (++listening < 2) return;
  fs.writeFileSync(portfile + '.tmp', JSON.stringify({ tls: tlsServer.address().port, plain: plainServer.address().port }));
  fs.renameSync(portfile + '.tmp', portfile);
};
tlsServer.listen(0, '127.0.0.1', ready);
plainServer.listen(0, '127.0.0.1', ready);
process.on('SIGTERM', () => process.exit(0));
