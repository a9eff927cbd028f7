/*
 * TLS for the HTTP front end: an OpenSSL server context from PEM files, ALPN preferring h2,
 * and non-blocking handshake/read/write on the connection's socket.
 *
 * OpenSSL reports WANT_READ/WANT_WRITE through a per-thread error queue; only the loop
 * thread calls into these functions, and every hard failure clears the queue so a stale
 * entry cannot turn the next connection's EAGAIN into an error.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>

#include "server_int.h"

/* Our preference order, in ALPN wire format. */
static const unsigned char alpn_protos[] = "\x02h2\x08http/1.1";

static void ssl_err(char *err, size_t errlen, const char *what, const char *file)
{
    char buf[256];
    unsigned long e = ERR_get_error();
    if (e)
        ERR_error_string_n(e, buf, sizeof(buf));
    else
        snprintf(buf, sizeof(buf), "%s", strerror(errno));
    snprintf(err, errlen, "%s %s: %s", what, file ? file : "", buf);
    ERR_clear_error();
}

/* Picks the first of our protocols that the client offers. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    for (size_t i = 0; i < sizeof(alpn_protos) - 1; i += 1 + alpn_protos[i]) {
        const unsigned char *want = alpn_protos + i + 1;
        unsigned int wlen = alpn_protos[i];
        for (unsigned int j = 0; j < inlen;) {
            unsigned int len = in[j];
            if (len == 0 || j + 1 + len > inlen)
                return SSL_TLSEXT_ERR_NOACK; /* malformed list: speak HTTP/1.1 */
            if (len == wlen && memcmp(in + j + 1, want, len) == 0) {
                *out = in + j + 1;
                *outlen = (unsigned char)len;
                return SSL_TLSEXT_ERR_OK;
            }
            j += 1 + len;
        }
    }
    return SSL_TLSEXT_ERR_NOACK;
}

SSL_CTX *pt_tls_ctx_new(const char *cert_file, const char *key_file, const char *client_ca_file,
                        char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        ssl_err(err, errlen, "SSL_CTX_new", NULL);
        goto fail;
    }
    /* h2 requires TLS 1.2 or later and AEAD ciphers with forward secrecy (RFC 9113 9.2). */
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_IGNORE_UNEXPECTED_EOF);
    if (SSL_CTX_set_cipher_list(ctx, "ECDHE+AESGCM:ECDHE+CHACHA20:DHE+AESGCM:DHE+CHACHA20") != 1) {
        ssl_err(err, errlen, "cipher list", NULL);
        goto fail_ctx;
    }
    /* Partial writes let a large body go out record by record; the buffer may move between
     * retries because the output buffer can be reallocated while a write waits. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"promtable", 9);
    if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
        ssl_err(err, errlen, "cannot load certificate", cert_file);
        goto fail_ctx;
    }
    if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
        ssl_err(err, errlen, "cannot load private key", key_file);
        goto fail_ctx;
    }
    if (SSL_CTX_check_private_key(ctx) != 1) {
        ssl_err(err, errlen, "private key does not match certificate", key_file);
        goto fail_ctx;
    }
    if (client_ca_file) {
        /* Verify and require: a client without a certificate the CA signs fails the
         * handshake. The CA names go in the CertificateRequest so clients can choose. */
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(client_ca_file);
        if (!names || SSL_CTX_load_verify_locations(ctx, client_ca_file, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            ssl_err(err, errlen, "cannot load client CA certificates", client_ca_file);
            goto fail_ctx;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
    return ctx;

fail_ctx:
    SSL_CTX_free(ctx);
fail:
    return NULL;
}

void pt_tls_ctx_free(SSL_CTX *ctx)
{
    SSL_CTX_free(ctx);
}

SSL *pt_tls_new(SSL_CTX *ctx, int fd)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        goto fail;
    if (SSL_set_fd(ssl, fd) != 1)
        goto fail_ssl;
    SSL_set_accept_state(ssl);
    return ssl;

fail_ssl:
    SSL_free(ssl);
fail:
    ERR_clear_error();
    return NULL;
}

/* Maps the outcome of an SSL call that did not succeed. */
static int io_result(SSL *ssl, int rv)
{
    switch (SSL_get_error(ssl, rv)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        return PT_IO_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    default:
        ERR_clear_error();
        return PT_IO_ERR;
    }
}

int pt_tls_handshake(SSL *ssl)
{
    int rv = SSL_do_handshake(ssl);
    if (rv == 1)
        return 0;
    rv = io_result(ssl, rv);
    return rv == PT_IO_AGAIN ? PT_IO_AGAIN : PT_IO_ERR;
}

ssize_t pt_tls_read(SSL *ssl, void *buf, size_t n)
{
    size_t got = 0;
    if (SSL_read_ex(ssl, buf, n, &got) == 1)
        return (ssize_t)got;
    return io_result(ssl, 0);
}

ssize_t pt_tls_write(SSL *ssl, const void *buf, size_t n)
{
    size_t put = 0;
    if (SSL_write_ex(ssl, buf, n, &put) == 1)
        return (ssize_t)put;
    int rv = io_result(ssl, 0);
    return rv == PT_IO_AGAIN ? PT_IO_AGAIN : PT_IO_ERR;
}

int pt_tls_alpn(SSL *ssl)
{
    const unsigned char *p = NULL;
    unsigned int len = 0;
    SSL_get0_alpn_selected(ssl, &p, &len);
    if (len == 2 && memcmp(p, "h2", 2) == 0)
        return 1;
    if (len == 8 && memcmp(p, "http/1.1", 8) == 0)
        return 0;
    return -1;
}

void pt_tls_free(SSL *ssl, int notify)
{
    if (!ssl)
        return;
    /* One non-blocking attempt: a peer that is gone or not reading gets no close_notify. */
    if (notify && SSL_is_init_finished(ssl))
        SSL_shutdown(ssl);
    ERR_clear_error();
    SSL_free(ssl);
}
