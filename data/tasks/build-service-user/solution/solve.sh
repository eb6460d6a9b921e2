#!/bin/bash
set -e
line="$(id -u appsvc) $(getent passwd appsvc | cut -d: -f6)"
runuser -u appsvc -- sh -c "umask 022; echo '$line' > /srv/app/ready.txt"
