/*
 * tls.h: the client TLS of the native HTTP path (engine/h1.c): OpenSSL over a BIO on the
 * connection's own buffers (tls_io), so the connection keeps reading its socket itself (recvmsg,
 * with the kernel's receive stamp: rxstamp.h) and only hands OpenSSL the ciphertext it read.
 *
 * Verification is libcurl's (engine/lhttp.c sends the same requests through it, and both paths
 * must accept and refuse the same servers): its built-in CA bundle and CA directory (asked of
 * libcurl, CURLINFO_CAINFO and CURLINFO_CAPATH) or the bundle a request names (ca_file, the
 * directory kept, as CURLOPT_CAINFO leaves CURLOPT_CAPATH), partial chains accepted and trusted
 * certificates first (libcurl's X509 store flags), the host name checked against the
 * certificate's names (an address against its IP names), no partial wildcards; none of it when
 * insecure (SSL_VERIFY_NONE). TLS 1.2 at least, SNI for names (not for addresses), ALPN as asked.
 */
#ifndef CSENG_TLS_H
#define CSENG_TLS_H

#include <openssl/ssl.h>
#include <stddef.h>

/* One SSL_CTX per (verify, CA bundle), kept for the process's life (a process uses a handful). */
typedef struct tls_conf tls_conf;

/* libcurl's built-in trust store (either NULL: none), before the first tls_conf_get. */
void tls_set_defaults(const char *ca_file, const char *ca_dir);

/* The configuration for verify (0: insecure) and ca_file (NULL: the built-in bundle); NULL when
 * out of memory. A bundle that does not load is kept as an error (tls_conf_error). */
tls_conf *tls_conf_get(int verify, const char *ca_file);

/* Why the CA bundle could not be used (libcurl: CURLE_SSL_CACERT_BADFILE); NULL when it could. */
const char *tls_conf_error(const tls_conf *cf);

/* Where a new session of a connection is kept (TLS 1.3 sends them after the handshake): the
 * slot given to tls_new. The previous session in it is freed. */
typedef struct {
  SSL_SESSION *session;
  unsigned long resumed, full; /* handshakes that resumed a session, and the others */
} tls_cache;

/* The connection's end of its SSL's BIO, instead of a pair of memory BIOs (each of which costs a
 * copy, a zeroed grow and a buffer of its own per connection, on every record): OpenSSL reads
 * the ciphertext the connection hands it in `in` (what one read of the socket brought, taken
 * where it lies; what OpenSSL does not take stays there, in_len) and writes its records through
 * out (0, or -1: the write fails). A read of nothing is "no data yet" (retry), never the end. */
typedef struct tls_io {
  const char *in;
  size_t in_len;
  int (*out)(struct tls_io *io, const char *p, size_t n);
} tls_io;

/* A client SSL on io for host (is_ip: an address, no SNI, checked against IP names), offering
 * alpn (ALPN's wire form; NULL: none), resuming cache's session. NULL when out of memory. */
SSL *tls_new(tls_conf *cf, const char *host, int is_ip, const unsigned char *alpn, size_t alpn_len,
             tls_cache *cache, tls_io *io);

/* After a failed handshake step: how it failed, in libcurl's terms. Returns 1 when the peer's
 * certificate was refused (CURLE_PEER_FAILED_VERIFICATION), 0 for any other failure
 * (CURLE_SSL_CONNECT_ERROR); msg gets libcurl's kind of message. Clears OpenSSL's error queue. */
int tls_failure(SSL *ssl, int ret, const char *host, int is_ip, char *msg, size_t n);

/* The handshake is done: count it in its cache (resumed or full). */
void tls_handshake_done(SSL *ssl);

/* Free every configuration (at shutdown). */
void tls_shutdown(void);

#endif
