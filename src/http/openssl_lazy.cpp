// OpenSSL loaded on first use. The shared build links no libssl: each OpenSSL function that
// stream.cpp (through Asio SSL) and tls_files.cpp call is defined here and forwards to the real
// one, which the first call loads with dlopen. A job without an https endpoint or TLS files
// never maps OpenSSL (1.7 MiB of its idle RSS, issue 25). The static build links OpenSSL
// itself and leaves this file out. A new OpenSSL call fails the link until it has a line here.
#include <dlfcn.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>

namespace {

// libssl and, as its dependency, libcrypto: dlsym on its handle finds the functions of both.
// Failing here means the OpenSSL this binary was built against is gone: nothing to fall back on.
void* OpenSslFunction(const char* name) {
  static void* const library = [] {
    void* handle = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      std::fprintf(stderr, "spotvisor: fatal: cannot load OpenSSL for TLS: %s\n", dlerror());
      std::abort();
    }
    return handle;
  }();
  void* function = dlsym(library, name);
  if (function == nullptr) {
    std::fprintf(stderr, "spotvisor: fatal: OpenSSL has no %s\n", name);
    std::abort();
  }
  return function;
}

}  // namespace

// Defines `name` with the declaration's own signature (a mismatch does not compile); the real
// function is looked up once, on the first call.
#define SPOTVISOR_OPENSSL(ret, name, params, args)                                      \
  extern "C" ret name params {                                                          \
    static const auto real = reinterpret_cast<decltype(&name)>(OpenSslFunction(#name)); \
    return real args;                                                                   \
  }

SPOTVISOR_OPENSSL(long, BIO_ctrl, (BIO * b, int cmd, long larg, void* parg), (b, cmd, larg, parg))
SPOTVISOR_OPENSSL(size_t, BIO_ctrl_pending, (BIO * b), (b))
SPOTVISOR_OPENSSL(int, BIO_free, (BIO * b), (b))
SPOTVISOR_OPENSSL(int, BIO_new_bio_pair, (BIO * *bio1, size_t writebuf1, BIO** bio2, size_t writebuf2),
                  (bio1, writebuf1, bio2, writebuf2))
SPOTVISOR_OPENSSL(BIO*, BIO_new_mem_buf, (const void* buf, int len), (buf, len))
SPOTVISOR_OPENSSL(int, BIO_read, (BIO * b, void* data, int len), (b, data, len))
SPOTVISOR_OPENSSL(int, BIO_write, (BIO * b, const void* data, int len), (b, data, len))
SPOTVISOR_OPENSSL(void, ERR_clear_error, (void), ())
SPOTVISOR_OPENSSL(unsigned long, ERR_get_error, (void), ())
SPOTVISOR_OPENSSL(const char*, ERR_lib_error_string, (unsigned long e), (e))
SPOTVISOR_OPENSSL(unsigned long, ERR_peek_error, (void), ())
SPOTVISOR_OPENSSL(unsigned long, ERR_peek_last_error, (void), ())
SPOTVISOR_OPENSSL(const char*, ERR_reason_error_string, (unsigned long e), (e))
SPOTVISOR_OPENSSL(void, EVP_PKEY_free, (EVP_PKEY * key), (key))
SPOTVISOR_OPENSSL(void, OPENSSL_cleanse, (void* ptr, size_t len), (ptr, len))
SPOTVISOR_OPENSSL(EVP_PKEY*, PEM_read_bio_PrivateKey, (BIO * b, EVP_PKEY** x, pem_password_cb* cb, void* u),
                  (b, x, cb, u))
SPOTVISOR_OPENSSL(X509*, PEM_read_bio_X509, (BIO * b, X509** x, pem_password_cb* cb, void* u), (b, x, cb, u))
SPOTVISOR_OPENSSL(X509*, PEM_read_bio_X509_AUX, (BIO * b, X509** x, pem_password_cb* cb, void* u), (b, x, cb, u))
SPOTVISOR_OPENSSL(long, SSL_CTX_ctrl, (SSL_CTX * ctx, int cmd, long larg, void* parg), (ctx, cmd, larg, parg))
SPOTVISOR_OPENSSL(void, SSL_CTX_free, (SSL_CTX * ctx), (ctx))
SPOTVISOR_OPENSSL(X509_STORE*, SSL_CTX_get_cert_store, (const SSL_CTX* ctx), (ctx))
SPOTVISOR_OPENSSL(pem_password_cb*, SSL_CTX_get_default_passwd_cb, (SSL_CTX * ctx), (ctx))
SPOTVISOR_OPENSSL(void*, SSL_CTX_get_default_passwd_cb_userdata, (SSL_CTX * ctx), (ctx))
SPOTVISOR_OPENSSL(void*, SSL_CTX_get_ex_data, (const SSL_CTX* ctx, int idx), (ctx, idx))
SPOTVISOR_OPENSSL(SSL_verify_cb, SSL_CTX_get_verify_callback, (const SSL_CTX* ctx), (ctx))
SPOTVISOR_OPENSSL(int, SSL_CTX_load_verify_locations, (SSL_CTX * ctx, const char* file, const char* path),
                  (ctx, file, path))
SPOTVISOR_OPENSSL(SSL_CTX*, SSL_CTX_new, (const SSL_METHOD* method), (method))
SPOTVISOR_OPENSSL(void, SSL_CTX_set_default_passwd_cb_userdata, (SSL_CTX * ctx, void* u), (ctx, u))
SPOTVISOR_OPENSSL(int, SSL_CTX_set_default_verify_paths, (SSL_CTX * ctx), (ctx))
SPOTVISOR_OPENSSL(int, SSL_CTX_set_ex_data, (SSL_CTX * ctx, int idx, void* data), (ctx, idx, data))
SPOTVISOR_OPENSSL(uint64_t, SSL_CTX_set_options, (SSL_CTX * ctx, uint64_t options), (ctx, options))
SPOTVISOR_OPENSSL(void, SSL_CTX_set_verify, (SSL_CTX * ctx, int mode, SSL_verify_cb callback), (ctx, mode, callback))
SPOTVISOR_OPENSSL(int, SSL_CTX_use_PrivateKey, (SSL_CTX * ctx, EVP_PKEY* key), (ctx, key))
SPOTVISOR_OPENSSL(int, SSL_CTX_use_certificate, (SSL_CTX * ctx, X509* x), (ctx, x))
SPOTVISOR_OPENSSL(int, SSL_accept, (SSL * ssl), (ssl))
SPOTVISOR_OPENSSL(int, SSL_connect, (SSL * ssl), (ssl))
SPOTVISOR_OPENSSL(long, SSL_ctrl, (SSL * ssl, int cmd, long larg, void* parg), (ssl, cmd, larg, parg))
SPOTVISOR_OPENSSL(void, SSL_free, (SSL * ssl), (ssl))
SPOTVISOR_OPENSSL(X509_VERIFY_PARAM*, SSL_get0_param, (SSL * ssl), (ssl))
SPOTVISOR_OPENSSL(int, SSL_get_error, (const SSL* ssl, int ret), (ssl, ret))
SPOTVISOR_OPENSSL(void*, SSL_get_ex_data, (const SSL* ssl, int idx), (ssl, idx))
SPOTVISOR_OPENSSL(int, SSL_get_shutdown, (const SSL* ssl), (ssl))
SPOTVISOR_OPENSSL(long, SSL_get_verify_result, (const SSL* ssl), (ssl))
SPOTVISOR_OPENSSL(SSL*, SSL_new, (SSL_CTX * ctx), (ctx))
SPOTVISOR_OPENSSL(int, SSL_read, (SSL * ssl, void* buf, int num), (ssl, buf, num))
SPOTVISOR_OPENSSL(int, SSL_set1_host, (SSL * ssl, const char* host), (ssl, host))
SPOTVISOR_OPENSSL(void, SSL_set_bio, (SSL * ssl, BIO* rbio, BIO* wbio), (ssl, rbio, wbio))
SPOTVISOR_OPENSSL(int, SSL_set_ex_data, (SSL * ssl, int idx, void* data), (ssl, idx, data))
SPOTVISOR_OPENSSL(int, SSL_write, (SSL * ssl, const void* buf, int num), (ssl, buf, num))
SPOTVISOR_OPENSSL(const SSL_METHOD*, TLS_client_method, (void), ())
// Referenced by Asio's ssl::context for the methods this client never asks for; an
// unoptimized build keeps those references, so they need their lines too.
SPOTVISOR_OPENSSL(const SSL_METHOD*, TLS_method, (void), ())
SPOTVISOR_OPENSSL(const SSL_METHOD*, TLS_server_method, (void), ())
SPOTVISOR_OPENSSL(EVP_PKEY*, d2i_PrivateKey_bio, (BIO * bp, EVP_PKEY** a), (bp, a))
SPOTVISOR_OPENSSL(int, X509_STORE_add_cert, (X509_STORE * store, X509* x), (store, x))
SPOTVISOR_OPENSSL(int, X509_VERIFY_PARAM_set1_ip_asc, (X509_VERIFY_PARAM * param, const char* ip), (param, ip))
SPOTVISOR_OPENSSL(int, X509_check_private_key, (const X509* x, const EVP_PKEY* key), (x, key))
SPOTVISOR_OPENSSL(void, X509_free, (X509 * x), (x))
SPOTVISOR_OPENSSL(const char*, X509_verify_cert_error_string, (long n), (n))
