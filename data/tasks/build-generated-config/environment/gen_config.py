"""Writes the service configuration from the build arguments (run at image build time)."""
import hashlib
import sys

port, env, region = sys.argv[1:4]
token = hashlib.sha256(("%s/%s/%s" % (port, env, region)).encode()).hexdigest()[:12]
print("[service]")
print("host = api-%s.%s.internal" % (env, region))
print("port = %s" % port)
print("path = /v1/%s" % token)
