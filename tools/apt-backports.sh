#!/bin/sh
# Adds Debian's bookworm-backports suite for libcurl 8.14 (HTTP/2 under load: issue 26) and installs
# it, pinned so that only curl's binary packages come from backports (every other package stays on
# bookworm, and what libcurl 8.14 depends on is bookworm's).
#
# The mirror is read from the machine's apt sources (the URI of the "bookworm" suite, one-line or
# deb822), as `cseng images rootfs` does for debootstrap: no host name is written here.
# Idempotent: a no-op when libcurl4-openssl-dev >= CSENG_CURL_MIN is installed.
#   tools/apt-backports.sh            add the suite, the pin, install
#   tools/apt-backports.sh --check    print the candidate versions only (apt-cache policy)
set -eu

SUITE=bookworm-backports
BASE=bookworm
MIN=${CSENG_CURL_MIN:-8.14.1}
LIST=/etc/apt/sources.list.d/cseng-backports.list
PREF=/etc/apt/preferences.d/cseng-backports
# curl's binary packages (source package curl) that the build and the engine use; libcurl4 and
# curl must move together (curl depends on libcurl4 of its own version).
PKGS="libcurl4-openssl-dev libcurl4 curl"

SUDO=
[ "$(id -u)" = 0 ] || SUDO=sudo

have() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }
if [ "${1:-}" != --check ] && v=$(have libcurl4-openssl-dev) && dpkg --compare-versions "$v" ge "$MIN"; then
  exit 0
fi

# The mirror of the base suite: deb822 stanzas (*.sources) and one-line entries (*.list).
mirror() {
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    [ "$f" = "$LIST" ] && continue
    case "$f" in
      *.sources)
        awk -v suite="$BASE" '
          function flush() { if (types ~ /(^| )deb( |$)/ && enabled != "no" && uris != "") {
              n = split(suites, s, /[ \t]+/); for (i = 1; i <= n; i++) if (s[i] == suite) { split(uris, u, /[ \t]+/); print u[1]; exit } }
            types = ""; uris = ""; suites = ""; enabled = "" }
          /^[ \t]*#/ { next }
          /^[ \t]*$/ { flush(); next }
          { k = tolower($1); sub(/:$/, "", k); v = $0; sub(/^[^:]*:[ \t]*/, "", v); sub(/[ \t]+$/, "", v)
            if (k == "types") types = v; else if (k == "uris") uris = v; else if (k == "suites") suites = v; else if (k == "enabled") enabled = tolower(v) }
          END { flush() }' "$f" ;;
      *)
        sed -n 's/^[[:space:]]*deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]*\)\{0,1\}\([^[:space:]]\{1,\}\)[[:space:]]\{1,\}'"$BASE"'[[:space:]].*/\2/p' "$f" ;;
    esac
  done | sed 's,/*$,,' | head -n 1
}

URL=$(mirror)
if [ -z "$URL" ]; then
  echo "tools/apt-backports.sh: no \"deb\" source for suite $BASE in /etc/apt/sources.list or /etc/apt/sources.list.d/ (cannot derive the $SUITE mirror)" >&2
  exit 1
fi

line="deb $URL $SUITE main"
if [ "$(cat "$LIST" 2>/dev/null)" != "$line" ]; then
  echo "$line" | $SUDO tee "$LIST" >/dev/null
fi
# Backports' Release says NotAutomatic (priority 1 without a pin); this pin keeps every package at
# that, except curl's own binaries, which follow the suite. A package libcurl 8.14 strictly needs and
# bookworm lacks would make the install fail (said below) rather than silently come from backports.
{
  echo "# cseng (tools/apt-backports.sh): only curl's packages from $SUITE"
  echo "Package: *"
  echo "Pin: release n=$SUITE"
  echo "Pin-Priority: 1"
  echo
  echo "Package: $PKGS"
  echo "Pin: release n=$SUITE"
  echo "Pin-Priority: 990"
} > /tmp/cseng-backports.pref.$$
if ! cmp -s /tmp/cseng-backports.pref.$$ "$PREF"; then $SUDO cp /tmp/cseng-backports.pref.$$ "$PREF"; fi
rm -f /tmp/cseng-backports.pref.$$

$SUDO apt-get update -qq
if [ "${1:-}" = --check ]; then
  apt-cache policy $PKGS
  exit 0
fi
cand=$(apt-cache policy libcurl4-openssl-dev | sed -n 's/^ *Candidate: //p')
if [ -z "$cand" ] || [ "$cand" = "(none)" ] || ! dpkg --compare-versions "$cand" ge "$MIN"; then
  echo "tools/apt-backports.sh: $SUITE offers libcurl4-openssl-dev '${cand:-none}', below the $MIN the engine needs" >&2
  exit 1
fi
echo "tools/apt-backports.sh: installing libcurl $cand from $SUITE"
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
