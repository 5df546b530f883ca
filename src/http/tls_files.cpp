// LoadTlsFiles: reads the PEM files of TlsFiles and checks them with OpenSSL's parsers, so a
// wrong file is refused when the config is checked, not at the first connection. No Asio
// here (the config checks and the fuzz build link this file). See tls.hpp.
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "spotvisor/http/tls.hpp"
#include "spotvisor/util/secret_file.hpp"

namespace spotvisor::http {
namespace {

constexpr std::size_t kMaxPemBytes = 1024 * 1024;  // a CA bundle; the system's is about 200 KiB
constexpr std::size_t kMaxKeyKib = 64;             // an RSA 16384-bit key is about 13 KiB

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// OpenSSL's words for the last failure, and an empty error queue after.
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  const char* reason = code != 0 ? ERR_reason_error_string(code) : nullptr;
  ERR_clear_error();
  return reason != nullptr ? reason : "no reason given";
}

Bio MemoryBio(const std::string& text) { return Bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size()))); }

// Never asked: an encrypted key has no one to type its passphrase.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*userdata*/) { return -1; }

Result<std::string> ReadPem(const std::filesystem::path& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot read the " + name + " " + path.string() + " (" + std::strerror(errno) + ")"};
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().size() > kMaxPemBytes) return Error{"the " + name + " " + path.string() + " is larger than 1 MiB"};
  return text.str();
}

// The certificates of a PEM text, in order; empty when it holds none.
std::vector<Certificate> Certificates(const std::string& pem) {
  std::vector<Certificate> out;
  Bio bio = MemoryBio(pem);
  while (Certificate c{PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)}) out.push_back(std::move(c));
  ERR_clear_error();  // the end of the text reads as an error
  return out;
}

Result<std::string> LoadCa(const std::filesystem::path& path) {
  auto pem = ReadPem(path, "CA file");
  if (!pem) return pem.error();
  if (Certificates(*pem).empty()) {
    return Error{"the CA file " + path.string() + " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"};
  }
  return pem;
}

Result<std::string> LoadKey(const std::filesystem::path& path, const std::string& cert_pem,
                            const std::filesystem::path& cert_path) {
  auto pem = ReadSecretFile(path, "TLS key", kMaxKeyKib);
  if (!pem) return pem.error();
  Bio bio = MemoryBio(*pem);
  Key key{PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr)};
  if (!key) {
    const bool encrypted = pem->find("ENCRYPTED") != std::string::npos;
    OPENSSL_cleanse(pem->data(), pem->size());
    if (encrypted) {
      ERR_clear_error();
      return Error{"the TLS key file " + path.string() +
                   " is encrypted; give the key without a passphrase (mode 0600)"};
    }
    return Error{"the TLS key file " + path.string() + " holds no PEM private key (" + OpenSslReason() + ")"};
  }
  const auto chain = Certificates(cert_pem);
  if (X509_check_private_key(chain.front().get(), key.get()) != 1) {
    OPENSSL_cleanse(pem->data(), pem->size());
    ERR_clear_error();
    return Error{"the TLS key file " + path.string() + " does not belong to the certificate in " + cert_path.string()};
  }
  return pem;
}

}  // namespace

const char* ToString(TlsFile file) {
  switch (file) {
    case TlsFile::kCa:
      return "ca";
    case TlsFile::kCert:
      return "cert";
    case TlsFile::kKey:
      return "key";
  }
  return "?";
}

TlsMaterial::~TlsMaterial() {
  if (!key_pem.empty()) OPENSSL_cleanse(key_pem.data(), key_pem.size());
}

Result<TlsMaterial> LoadTlsFiles(const TlsFiles& files, TlsFile* failed) {
  auto fail = [failed](TlsFile file, Error error) {
    if (failed != nullptr) *failed = file;
    return error;
  };
  TlsMaterial material;
  if (!files.ca.empty()) {
    auto ca = LoadCa(files.ca);
    if (!ca) return fail(TlsFile::kCa, ca.error());
    material.ca_pem = std::move(*ca);
  }
  if (files.cert.empty() != files.key.empty()) {
    const TlsFile missing = files.cert.empty() ? TlsFile::kCert : TlsFile::kKey;
    return fail(files.cert.empty() ? TlsFile::kKey : TlsFile::kCert,
                Error{std::string("a client certificate needs its key and a key its certificate: ") +
                      ToString(missing) + " is not set"});
  }
  if (files.cert.empty()) return material;
  auto cert = ReadPem(files.cert, "certificate file");
  if (!cert) return fail(TlsFile::kCert, cert.error());
  if (Certificates(*cert).empty()) {
    return fail(TlsFile::kCert, Error{"the certificate file " + files.cert.string() +
                                      " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"});
  }
  material.cert_pem = std::move(*cert);
  auto key = LoadKey(files.key, material.cert_pem, files.cert);
  if (!key) return fail(TlsFile::kKey, key.error());
  material.key_pem = std::move(*key);
  return material;
}

}  // namespace spotvisor::http
