/*
 * tls.c: client TLS contexts, sessions and failures for the native HTTP path (see tls.h).
 *
 * A context per (verify, CA bundle): loading a bundle parses every certificate in it (the
 * system's is some 140), so it is done once, as libcurl keeps its X509 store cached per bundle.
 * Sessions are kept per origin by h1.c (the cache handed to tls_new) and offered to the next
 * connection to the same origin and configuration, as libcurl's session cache does; TLS 1.3
 * servers send them after the handshake, so they arrive through the new-session callback.
 */
#include "tls.h"

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct tls_conf {
  struct tls_conf *next;
  SSL_CTX *ctx;
  int verify;
  char *ca_file; /* NULL: the built-in bundle */
  char *error;   /* the bundle did not load: why */
};

static struct {
  tls_conf *confs;
  char *ca_default, *ca_dir;
  int cache_idx; /* SSL ex_data: the connection's tls_cache */
  BIO_METHOD *io; /* the connections' BIO (tls_io), made once for the process's life */
} T = {.cache_idx = -1};

/* ---- the BIO over a tls_io ---------------------------------------------------------------- */

static int io_read(BIO *b, char *out, int len) {
  tls_io *io = BIO_get_data(b);
  size_t n;
  BIO_clear_retry_flags(b);
  if (!io || !io->in_len) {
    BIO_set_retry_read(b); /* nothing yet: the next read of the socket brings it */
    return -1;
  }
  n = io->in_len < (size_t)len ? io->in_len : (size_t)len;
  memcpy(out, io->in, n);
  io->in += n;
  io->in_len -= n;
  return (int)n;
}

static int io_write(BIO *b, const char *p, int len) {
  tls_io *io = BIO_get_data(b);
  BIO_clear_retry_flags(b);
  if (len <= 0) return 0;
  return io && io->out(io, p, (size_t)len) == 0 ? len : -1;
}

static long io_ctrl(BIO *b, int cmd, long num, void *ptr) {
  tls_io *io = BIO_get_data(b);
  (void)num;
  (void)ptr;
  switch (cmd) {
  case BIO_CTRL_FLUSH: return 1; /* the connection sends what was written at its own flush points */
  case BIO_CTRL_PENDING: return io ? (long)io->in_len : 0;
  default: return 0; /* no EOF, no kTLS, nothing else */
  }
}

static int io_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static int io_destroy(BIO *b) {
  BIO_set_data(b, NULL);
  return 1;
}

static BIO *io_bio(tls_io *io) {
  BIO *b;
  if (!T.io) {
    int type = BIO_get_new_index();
    if (type < 0 || !(T.io = BIO_meth_new(type | BIO_TYPE_SOURCE_SINK, "cseng connection"))) return NULL;
    if (!BIO_meth_set_read(T.io, io_read) || !BIO_meth_set_write(T.io, io_write) ||
        !BIO_meth_set_ctrl(T.io, io_ctrl) || !BIO_meth_set_create(T.io, io_create) ||
        !BIO_meth_set_destroy(T.io, io_destroy)) {
      BIO_meth_free(T.io);
      T.io = NULL;
      return NULL;
    }
  }
  if (!(b = BIO_new(T.io))) return NULL;
  BIO_set_data(b, io);
  return b;
}

void tls_set_defaults(const char *ca_file, const char *ca_dir) {
  free(T.ca_default);
  free(T.ca_dir);
  T.ca_default = ca_file ? strdup(ca_file) : NULL;
  T.ca_dir = ca_dir ? strdup(ca_dir) : NULL;
}

/* TLS 1.3 hands sessions over after the handshake: keep the newest in the connection's cache. */
static int new_session(SSL *ssl, SSL_SESSION *sess) {
  tls_cache *c = SSL_get_ex_data(ssl, T.cache_idx);
  if (!c) return 0;
  if (c->session) SSL_SESSION_free(c->session);
  c->session = sess;
  return 1; /* the reference is ours */
}

static void openssl_text(char *out, size_t n) {
  unsigned long e = ERR_peek_last_error();
  if (e) ERR_error_string_n(e, out, n);
  else snprintf(out, n, "unknown error");
}

tls_conf *tls_conf_get(int verify, const char *ca_file) {
  tls_conf *cf;
  verify = verify != 0;
  if (!verify) ca_file = NULL; /* libcurl loads no CA when it verifies nothing */
  for (cf = T.confs; cf; cf = cf->next)
    if (cf->verify == verify && (cf->ca_file == ca_file || (cf->ca_file && ca_file && strcmp(cf->ca_file, ca_file) == 0)))
      return cf;
  if (T.cache_idx < 0 && (T.cache_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL)) < 0) return NULL;
  if (!(cf = calloc(1, sizeof *cf))) return NULL;
  cf->verify = verify;
  if (ca_file && !(cf->ca_file = strdup(ca_file))) goto oom;
  if (!(cf->ctx = SSL_CTX_new(TLS_client_method()))) goto oom;
  SSL_CTX_set_min_proto_version(cf->ctx, TLS1_2_VERSION); /* libcurl's default floor */
  SSL_CTX_set_options(cf->ctx, SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_session_cache_mode(cf->ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_sess_set_new_cb(cf->ctx, new_session);
  if (verify) {
    const char *file = ca_file ? ca_file : T.ca_default;
    char why[256];
    SSL_CTX_set_verify(cf->ctx, SSL_VERIFY_PEER, NULL);
    /* libcurl's store: partial chains accepted (CURLSSLOPT_NO_PARTIALCHAIN unset), trusted first */
    X509_STORE_set_flags(SSL_CTX_get_cert_store(cf->ctx), X509_V_FLAG_PARTIAL_CHAIN | X509_V_FLAG_TRUSTED_FIRST);
    if ((file || T.ca_dir) && SSL_CTX_load_verify_locations(cf->ctx, file, T.ca_dir) != 1) {
      openssl_text(why, sizeof why);
      ERR_clear_error();
      static const char fmt[] = "error setting certificate verify locations: CAfile: %s CApath: %s (%s)";
      const char *f = file ? file : "none", *d = T.ca_dir ? T.ca_dir : "none";
      int len = snprintf(NULL, 0, fmt, f, d, why);
      if (len < 0 || !(cf->error = malloc((size_t)len + 1))) goto oom;
      snprintf(cf->error, (size_t)len + 1, fmt, f, d, why);
    }
  } else
    SSL_CTX_set_verify(cf->ctx, SSL_VERIFY_NONE, NULL);
  cf->next = T.confs;
  T.confs = cf;
  return cf;
oom:
  if (cf->ctx) SSL_CTX_free(cf->ctx);
  free(cf->ca_file);
  free(cf);
  return NULL;
}

const char *tls_conf_error(const tls_conf *cf) { return cf->error; }

SSL *tls_new(tls_conf *cf, const char *host, int is_ip, const unsigned char *alpn, size_t alpn_len, tls_cache *cache,
             tls_io *io) {
  SSL *ssl = SSL_new(cf->ctx);
  BIO *b = NULL;
  if (!ssl || !(b = io_bio(io))) goto fail;
  SSL_set_bio(ssl, b, b); /* (one reference, both ways) */
  b = NULL;
  SSL_set_connect_state(ssl);
  if (!is_ip && SSL_set_tlsext_host_name(ssl, host) != 1) goto fail;
  if (cf->verify) {
    X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);
    X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, host) != 1 : X509_VERIFY_PARAM_set1_host(vp, host, 0) != 1) goto fail;
  }
  if (alpn && SSL_set_alpn_protos(ssl, alpn, (unsigned)alpn_len) != 0) goto fail;
  if (cache) {
    SSL_set_ex_data(ssl, T.cache_idx, cache);
    if (cache->session) SSL_set_session(ssl, cache->session);
  }
  return ssl;
fail:
  ERR_clear_error();
  BIO_free(b);
  SSL_free(ssl);
  return NULL;
}

void tls_handshake_done(SSL *ssl) {
  tls_cache *c = SSL_get_ex_data(ssl, T.cache_idx);
  if (!c) return;
  if (SSL_session_reused(ssl)) c->resumed++;
  else c->full++;
}

int tls_failure(SSL *ssl, int ret, const char *host, int is_ip, char *msg, size_t n) {
  long v = SSL_get_verify_result(ssl);
  int e = SSL_get_error(ssl, ret);
  char why[256];
  if (v != X509_V_OK && SSL_get_verify_mode(ssl) != SSL_VERIFY_NONE) {
    if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
      snprintf(msg, n, "SSL: no alternative certificate subject name matches target %s '%s'",
               is_ip ? "ip address" : "host name", host);
    else snprintf(msg, n, "SSL certificate problem: %s", X509_verify_cert_error_string(v));
    ERR_clear_error();
    return 1;
  }
  if (e == SSL_ERROR_SSL) {
    openssl_text(why, sizeof why);
    snprintf(msg, n, "TLS connect error: %s", why);
  } else
    snprintf(msg, n, "TLS connect error: the connection closed during the handshake");
  ERR_clear_error();
  return 0;
}

void tls_shutdown(void) {
  while (T.confs) {
    tls_conf *cf = T.confs;
    T.confs = cf->next;
    SSL_CTX_free(cf->ctx);
    free(cf->ca_file);
    free(cf->error);
    free(cf);
  }
  free(T.ca_default);
  free(T.ca_dir);
  T.ca_default = T.ca_dir = NULL;
  /* (T.io stays: connections closed at shutdown free their SSL, and its BIO, after this) */
}
