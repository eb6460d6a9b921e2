// A tiny HTTP/2 cleartext (h2c, prior knowledge) server on loopback for spec/engine/http2_spec.lua,
// built on node's own http2 module (nghttp2 is not involved on this side: an independent
// implementation of the protocol). Also an HTTP/1.1-only server for the refusal case.
//
//   node h2_server.mjs PORTFILE   -> writes {"h2": port, "h1": port} to PORTFILE once listening
//
// h2 routes: POST /echo (body back, trailers x-trailer + grpc-status/grpc-message),
// GET /barrier?n=N (answers only once N such requests are open at the same time),
// GET /stream?id=X&n=N (N chunks; chunk k+1 is sent only after GET /release?id=X),
// GET /stats ({sessions, streams, max_open}), GET /headers (the request headers as JSON).
import http2 from 'node:http2';
import http from 'node:http';
import fs from 'node:fs';

const portfile = process.argv[2];
let sessions = 0, streams = 0, open = 0, maxOpen = 0;
const barrier = [];
const streamsById = new Map();

const server = http2.createServer();
server.on('session', () => { sessions++; });
server.on('stream', (stream, headers) => {
  streams++;
  open++;
  maxOpen = Math.max(maxOpen, open);
  stream.on('close', () => { open--; });
  const url = new URL(headers[':path'], 'http://x');
  const q = url.searchParams;
  const chunks = [];
  stream.on('data', (c) => chunks.push(c));
  stream.on('end', () => {
    const body = Buffer.concat(chunks);
    switch (url.pathname) {
      case '/echo':
        stream.respond({ ':status': 200, 'content-type': 'application/octet-stream' }, { waitForTrailers: true });
        stream.on('wantTrailers', () => stream.sendTrailers({ 'x-trailer': 'yes', 'grpc-status': '0', 'grpc-message': 'all%20good', 'x-len': String(body.length) }));
        stream.end(body);
        break;
      case '/barrier': {
        const n = Number(q.get('n'));
        barrier.push(stream);
        if (barrier.length >= n) {
          for (const s of barrier.splice(0)) {
            if (!s.destroyed) { s.respond({ ':status': 200 }); s.end(`released with ${n} open`); }
          }
        }
        break;
      }
      case '/stream': {
        const n = Number(q.get('n'));
        let k = 0;
        stream.respond({ ':status': 200, 'content-type': 'text/plain' });
        const next = () => {
          k++;
          stream.write(`chunk ${k};`);
          if (k >= n) { streamsById.delete(q.get('id')); stream.end(); }
        };
        streamsById.set(q.get('id'), next);
        next();
        break;
      }
      case '/release': {
        const next = streamsById.get(q.get('id'));
        stream.respond({ ':status': next ? 200 : 404 });
        stream.end();
        if (next) next();
        break;
      }
      case '/stats':
        stream.respond({ ':status': 200, 'content-type': 'application/json' });
        stream.end(JSON.stringify({ sessions, streams, max_open: maxOpen }));
        break;
      case '/headers':
        stream.respond({ ':status': 200, 'content-type': 'application/json' });
        stream.end(JSON.stringify(headers));
        break;
      default:
        stream.respond({ ':status': 404 });
        stream.end();
    }
  });
});

const h1 = http.createServer((req, res) => { res.end('HTTP/1.1 only'); });

server.listen(0, '127.0.0.1', () => {
  h1.listen(0, '127.0.0.1', () => {
    fs.writeFileSync(portfile + '.tmp', JSON.stringify({ h2: server.address().port, h1: h1.address().port }));
    fs.renameSync(portfile + '.tmp', portfile);
  });
});
process.on('SIGTERM', () => process.exit(0));
