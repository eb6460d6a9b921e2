/* h1_check.h: h1_url_split (engine/h1.c) checked against libcurl's own URL parser (curl_url),
 * the parser whose requests the native path must reproduce. Shared by fuzz/h1_fuzz.c and
 * test/c/h1_test.c. h1_check(url) returns 1 when the native path takes the URL (and everything
 * it split agrees with libcurl), 0 when it leaves the URL to libcurl, and -1 (with *why) when it
 * took a URL libcurl reads differently: a host, port, path or query that differs, a URL libcurl
 * refuses, or a target with bytes a request line cannot carry. */
#ifndef CSENG_H1_CHECK_H
#define CSENG_H1_CHECK_H

#include <curl/curl.h>
#include <stdio.h>
#include <string.h>

#include "h1.h"

static int h1_check(const char *url, const char **why) {
  h1_url u;
  CURLU *c;
  char *host = NULL, *port = NULL, *path = NULL, *query = NULL, mine[2100], theirs[2100];
  int rc = 1;
  if (!h1_url_split(url, strlen(url), &u)) return 0;
  *why = NULL;
  for (size_t i = 0; i < u.target_len; i++)
    if ((unsigned char)u.target[i] <= 0x20 || (unsigned char)u.target[i] >= 0x7f) *why = "a control byte or space in the target";
  if (u.port < 1 || u.port > 65535) *why = "port out of range";
  if (u.host_len == 0) *why = "empty host";
  if (*why) return -1;
  if (!(c = curl_url())) return 0;
  if (curl_url_set(c, CURLUPART_URL, url, 0) != CURLUE_OK) {
    curl_url_cleanup(c);
    *why = "libcurl refuses the URL";
    return -1;
  }
  {
    char *scheme = NULL;
    curl_url_get(c, CURLUPART_SCHEME, &scheme, 0);
    if (!scheme || strcmp(scheme, u.tls ? "https" : "http") != 0) rc = -1, *why = "scheme differs";
    curl_free(scheme);
  }
  curl_url_get(c, CURLUPART_HOST, &host, 0);
  curl_url_get(c, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT);
  curl_url_get(c, CURLUPART_PATH, &path, 0);
  curl_url_get(c, CURLUPART_QUERY, &query, 0);
  snprintf(mine, sizeof mine, "%s%.*s%s", u.ipv6 ? "[" : "", (int)u.host_len, u.host, u.ipv6 ? "]" : "");
  if (!host || strcmp(host, mine) != 0) rc = -1, *why = "host differs";
  snprintf(mine, sizeof mine, "%d", u.port);
  if (rc == 1 && (!port || strcmp(port, mine) != 0)) rc = -1, *why = "port differs";
  if (rc == 1 && u.default_port != (u.port == (u.tls ? 443 : 80))) rc = -1, *why = "default port misread";
  snprintf(mine, sizeof mine, "%.*s", (int)u.target_len, u.target);
  if (!mine[0]) strcpy(mine, "/");
  snprintf(theirs, sizeof theirs, "%s%s%s", path ? path : "/", query ? "?" : "", query ? query : "");
  if (rc == 1 && strcmp(mine, theirs) != 0) rc = -1, *why = "path or query differs";
  curl_free(host);
  curl_free(port);
  curl_free(path);
  curl_free(query);
  curl_url_cleanup(c);
  return rc;
}

#endif
