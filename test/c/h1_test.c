/* h1_test.c: unit tests for engine/h1.c's URL split (h1_url_split), the part of the native
 * HTTP/1.1 path that decides which requests leave libcurl. Each URL is expected to be taken
 * or left; every one taken is checked against libcurl's own parser (fuzz/h1_check.h: same host,
 * port, path and query), and the split fields of a few are checked by value. Built with
 * ASan/UBSan by the Makefile. Prints "N passed, N failed". */
#include "../../fuzz/h1_check.h"

#include "check.h"

static void expect(const char *url, int taken) {
  const char *why = NULL;
  int rc = h1_check(url, &why);
  CHECK(rc == taken, "%s: got %d (%s), want %d", url, rc, why ? why : "-", taken);
}

int main(void) {
  h1_url u;
  /* taken: plain http to a name, an address, a port, a query */
  expect("http://127.0.0.1:8080/api/sandboxes", 1);
  expect("http://127.0.0.1:8080", 1);
  expect("http://localhost/x?y=1&z=%20", 1);
  expect("http://[::1]:9/a/b", 1);
  expect("http://a.b-c.example:80/", 1);
  expect("http://h/a#frag", 1);
  expect("http://h/a?b#frag", 1);
  expect("http://1password.example/", 1);
  expect("http://h/a/.b/..c/", 1);
  /* taken over TLS too */
  expect("https://h/", 1);
  expect("https://127.0.0.1:8443/api?x=1", 1);
  expect("https://[::1]/a", 1);
  /* left to libcurl: user info, dot segments, odd hosts, odd ports, bytes libcurl rewrites */
  expect("HTTP://h/", 0);
  expect("HTTPS://h/", 0);
  expect("https:/h/", 0);
  expect("https://user@h/", 0);
  expect("https://h:/", 0);
  expect("http://user@h/", 0);
  expect("http://user:pw@h/", 0);
  expect("http://h/a/./b", 0);
  expect("http://h/a/../b", 0);
  expect("http://h/%2e%2e/x", 0); /* libcurl decodes these dots, and removes the segment */
  expect("http://h/a%2Eb", 0);
  expect("http://h/..", 0);
  expect("http://h/.", 0);
  expect("http://h/a/..?x", 0);
  expect("http://H/", 0);
  expect("http://h./", 0);
  expect("http://a..b/", 0);
  expect("http://-h/", 0);
  expect("http://127.1/", 0);
  expect("http://0x7f.0.0.1/", 0);
  expect("http://010.0.0.1/", 0);
  expect("http://256.0.0.1/", 0);
  expect("http://h:0/", 0);
  expect("http://h:65536/", 0);
  expect("http://h:/", 0);
  expect("http://h:8x/", 0);
  expect("http://h?q", 0);
  expect("http://h/x?", 0);
  expect("http://h/x?#f", 0);
  expect("http://h/x?a?", 1);
  expect("http://h/a b", 0);
  expect("http://h/a\tb", 0);
  expect("http://h/\x7f", 0);
  expect("http://h/\xc3\xa9", 0);
  expect("http://h/a\\b", 0);
  expect("http://[::1/", 0);
  expect("http://[zz]/", 0);
  expect("http://[::0]/", 0); /* libcurl writes it [::] */
  expect("http://[fe80::1%25eth0]/", 0);
  expect("http://", 0);
  expect("http:///x", 0);
  /* the split itself */
  CHECK(h1_url_split("http://[::1]:9/a?b#c", 20, &u) == 1 && u.ipv6 && u.host_len == 3 &&
            memcmp(u.host, "::1", 3) == 0 && u.port == 9 && !u.default_port && u.target_len == 4 &&
            memcmp(u.target, "/a?b", 4) == 0,
        "[::1]:9");
  CHECK(h1_url_split("http://h", 8, &u) == 1 && u.port == 80 && u.default_port && u.target_len == 0, "bare host");
  CHECK(h1_url_split("http://h:80/x", 13, &u) == 1 && u.port == 80 && u.default_port, ":80 left out of Host");
  CHECK(h1_url_split("http://h:8080/x", 15, &u) == 1 && u.port == 8080 && !u.default_port, ":8080 kept");
  CHECK(h1_url_split("https://h", 9, &u) == 1 && u.tls && u.port == 443 && u.default_port, "https: 443");
  CHECK(h1_url_split("https://h:443/x", 15, &u) == 1 && u.tls && u.port == 443 && u.default_port, ":443 left out of Host");
  CHECK(h1_url_split("https://h:80/x", 14, &u) == 1 && u.tls && u.port == 80 && !u.default_port, "https :80 kept");
  CHECK(h1_url_split("http://h:443/x", 14, &u) == 1 && !u.tls && u.port == 443 && !u.default_port, "http :443 kept");
  /* the authority the split keeps from one URL is not another scheme's: the same "h" is 80, then 443 */
  CHECK(h1_url_split("http://h/a", 10, &u) == 1 && !u.tls && u.port == 80, "http://h after nothing");
  CHECK(h1_url_split("https://h/a", 11, &u) == 1 && u.tls && u.port == 443, "https://h after http://h");
  CHECK(h1_url_split("http://h/a", 10, &u) == 1 && !u.tls && u.port == 80, "http://h after https://h");
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
