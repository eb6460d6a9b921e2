#!/bin/bash
set -e
get() { sed -n "s/^$1 = //p" /etc/cseng-app/app.ini; }
echo "http://$(get host):$(get port)$(get path)" > /workspace/endpoint.txt
