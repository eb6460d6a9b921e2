"""SigV4 signing and verification with botocore (Debian's python3-botocore), an implementation
that is not cseng's: the fakes verify every signed request with it and spec/lib/aws/sigv4_spec.lua
cross-checks lua/cseng/lib/aws/sigv4.lua against it.

Python API (import it with sys.path.insert(0, '<root>/spec/providers/aws_microvm'); import sigv4_verify):

  verify(method, path, query, headers, body, keys, *, host=None, scheme='http',
         region=None, service=None, now=None, max_skew=None) -> dict
      method:  'GET', 'POST', ...
      path:    the raw request path as received (still percent-encoded), e.g. '/2025-09-09/microvms'
      query:   the raw query string without '?' ('' for none)
      headers: a list of (name, value) pairs as received (repeats allowed) or a dict
      body:    bytes or str ('' for none)
      keys:    {access_key_id: secret_access_key} or
               {access_key_id: {'secret_access_key': s, 'session_token': t}}; with a session
               token the request must carry the same X-Amz-Security-Token
      host:    the Host to sign with when the headers have none
      region, service: when given, the credential scope must name them
      now:     a datetime (UTC) and max_skew (seconds): refuse an X-Amz-Date farther than that
    Returns {'ok': bool, 'reason': str ('' when ok; otherwise what is wrong, e.g.
    'signature mismatch', 'unknown access key id AKID', 'missing Authorization header'),
    'access_key_id', 'region', 'service', 'signed_headers', 'canonical_request',
    'string_to_sign'} (the last two only once the request got as far as being re-signed).
    S3 (service 's3'): S3SigV4Auth, no path normalization; X-Amz-Content-Sha256 must be present
    and, unless 'UNSIGNED-PAYLOAD', equal to the SHA-256 of the body.
    Presigned (query) requests are not verified: 'ok' False, reason 'query signing unsupported'.

  sign(method, url, headers, body, region, service, access_key_id, secret_access_key,
       session_token=None, timestamp=None) -> dict
      Signs like the AWS SDKs do (SigV4Auth, S3SigV4Auth for service 's3'), at timestamp
      ('YYYYMMDDTHHMMSSZ', default now). Returns {'headers': the request's headers after
      signing (a list of [name, value]), 'authorization', 'canonical_request', 'string_to_sign', 'signature'}.

Command line (JSON in on stdin, JSON out on stdout, one result per input item):
  python3 sigv4_verify.py sign   < [{"method":..., "url":..., "headers":[[n,v],...], "body":...,
                                     "region":..., "service":..., "access_key_id":...,
                                     "secret_access_key":..., "session_token":..., "timestamp":...}, ...]
  python3 sigv4_verify.py verify < [{"method":..., "path":..., "query":..., "headers":[[n,v],...],
                                     "body":..., "keys":{...}, "host":..., "region":..., "service":...}, ...]
"""

import datetime
import hashlib
import hmac
import json
import re
import sys

from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

SIGV4_TIMESTAMP = '%Y%m%dT%H%M%SZ'
UNSIGNED_PAYLOAD = 'UNSIGNED-PAYLOAD'
_AUTH_RE = re.compile(
    r'^AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request\s*,\s*'
    r'SignedHeaders=([a-z0-9\-;._~]+)\s*,\s*Signature=([0-9a-f]{64})$')


def _auth_class(service):
    return S3SigV4Auth if service == 's3' else SigV4Auth


def _signed(auth, request, timestamp):
    """botocore's add_auth at a given time (add_auth itself reads the clock)."""
    request.context['timestamp'] = timestamp
    auth._modify_request_before_signing(request)
    creq = auth.canonical_request(request)
    sts = auth.string_to_sign(request, creq)
    sig = auth.signature(sts, request)
    auth._inject_signature_to_request(request, sig)
    return creq, sts, sig


def _pairs(headers):
    if isinstance(headers, dict):
        return list(headers.items())
    return [(h[0], h[1]) for h in headers]


def _bytes(body):
    if body is None:
        return b''
    if isinstance(body, str):
        return body.encode('utf-8', 'surrogateescape')
    return body


def sign(method, url, headers, body, region, service, access_key_id, secret_access_key,
         session_token=None, timestamp=None):
    timestamp = timestamp or datetime.datetime.utcnow().strftime(SIGV4_TIMESTAMP)
    creds = Credentials(access_key_id, secret_access_key, session_token or None)
    auth = _auth_class(service)(creds, service, region)
    req = AWSRequest(method=method, url=url, data=_bytes(body))
    for name, value in _pairs(headers or []):
        req.headers[name] = value  # an email.message.Message: a repeated name is appended
    creq, sts, sig = _signed(auth, req, timestamp)
    return {'headers': [list(kv) for kv in req.headers.items()], 'authorization': req.headers['Authorization'],
            'canonical_request': creq, 'string_to_sign': sts, 'signature': sig}


def verify(method, path, query, headers, body, keys, *, host=None, scheme='http', region=None,
           service=None, now=None, max_skew=None):
    res = {'ok': False, 'reason': '', 'access_key_id': None, 'region': None, 'service': None,
           'signed_headers': None}
    pairs = _pairs(headers or [])
    lower = {}
    for name, value in pairs:
        lower.setdefault(name.lower(), []).append(value)

    def fail(reason):
        res['reason'] = reason
        return res

    if 'x-amz-signature' in (query or '').lower():
        return fail('query signing unsupported')
    authz = lower.get('authorization')
    if not authz:
        return fail('missing Authorization header')
    if len(authz) > 1:
        return fail('more than one Authorization header')
    m = _AUTH_RE.match(authz[0].strip())
    if not m:
        return fail('malformed Authorization header')
    akid, date, c_region, c_service, signed, claimed = m.groups()
    res.update(access_key_id=akid, region=c_region, service=c_service, signed_headers=signed)
    if akid not in keys:
        return fail('unknown access key id ' + akid)
    key = keys[akid]
    secret, token = (key, None) if isinstance(key, str) else (key['secret_access_key'], key.get('session_token'))
    if region is not None and c_region != region:
        return fail('credential scope region %s, expected %s' % (c_region, region))
    if service is not None and c_service != service:
        return fail('credential scope service %s, expected %s' % (c_service, service))
    amz_date = lower.get('x-amz-date', [None])[0]
    if not amz_date or not re.match(r'^\d{8}T\d{6}Z$', amz_date):
        return fail('missing or malformed X-Amz-Date header')
    if amz_date[:8] != date:
        return fail('credential scope date %s does not match X-Amz-Date %s' % (date, amz_date))
    if now is not None and max_skew is not None:
        t = datetime.datetime.strptime(amz_date, SIGV4_TIMESTAMP)
        if abs((t - now.replace(tzinfo=None)).total_seconds()) > max_skew:
            return fail('request time %s is too far from now' % amz_date)
    names = signed.split(';')
    if names != sorted(set(names)):
        return fail('SignedHeaders not sorted or repeated')
    for must in ['host', 'x-amz-date'] + [n for n in ('x-amz-security-token', 'x-amz-content-sha256') if n in lower]:
        if must not in names and not (must == 'host' and host is not None and 'host' not in lower):
            return fail('header %s present but not signed' % must)
    for n in names:
        if n not in lower and not (n == 'host' and host is not None):
            return fail('signed header %s missing from the request' % n)
    if token is not None and lower.get('x-amz-security-token', [None])[0] != token:
        return fail('missing or wrong X-Amz-Security-Token')
    data = _bytes(body)
    if c_service == 's3':
        sha = lower.get('x-amz-content-sha256', [None])[0]
        if sha is None:
            return fail('missing X-Amz-Content-Sha256 header')
        if sha != UNSIGNED_PAYLOAD and sha != hashlib.sha256(data).hexdigest():
            return fail('X-Amz-Content-Sha256 does not match the body')
    the_host = (lower.get('host') or [host])[0]
    url = '%s://%s%s%s' % (scheme, the_host, path or '/', ('?' + query) if query else '')
    req = AWSRequest(method=method, url=url, data=data)
    for name, value in pairs:
        ln = name.lower()
        if ln in names and ln != 'authorization':
            req.headers[name] = value  # repeats appended, joined with ',' when signing
    auth = _auth_class(c_service)(Credentials(akid, secret, lower.get('x-amz-security-token', [None])[0]),
                                  c_service, c_region)
    # canonical request from the headers as received (no _modify_request_before_signing)
    req.context['timestamp'] = amz_date
    creq = auth.canonical_request(req)
    sts = auth.string_to_sign(req, creq)
    sig = auth.signature(sts, req)
    res.update(canonical_request=creq, string_to_sign=sts)
    if auth.signed_headers(auth.headers_to_sign(req)) != signed:
        return fail('SignedHeaders %s differ from the signable headers received' % signed)
    if not hmac.compare_digest(sig, claimed):
        return fail('signature mismatch')
    res['ok'] = True
    return res


def main(argv):
    if len(argv) != 2 or argv[1] not in ('sign', 'verify'):
        sys.stderr.write('usage: sigv4_verify.py sign|verify < requests.json\n')
        return 2
    items = json.load(sys.stdin)
    out = []
    for it in items:
        if argv[1] == 'sign':
            out.append(sign(it['method'], it['url'], it.get('headers') or [], it.get('body') or '',
                            it['region'], it['service'], it['access_key_id'], it['secret_access_key'],
                            it.get('session_token'), it.get('timestamp')))
        else:
            r = verify(it['method'], it['path'], it.get('query') or '', it.get('headers') or [],
                       it.get('body') or '', it['keys'], host=it.get('host'), scheme=it.get('scheme', 'http'),
                       region=it.get('region'), service=it.get('service'))
            out.append(r)
    json.dump(out, sys.stdout)
    sys.stdout.write('\n')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
