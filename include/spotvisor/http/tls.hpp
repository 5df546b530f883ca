// Client TLS for https endpoints: the PEM files that say whom to trust and, for mutual TLS,
// who we are (TlsFiles); their checked contents (LoadTlsFiles: OpenSSL, no network, no
// Asio); and the OpenSSL context that connections share (MakeTlsContext, in stream.cpp).
// Key material is never put in a message and is wiped from memory when dropped. Any thread.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "spotvisor/util/result.hpp"

namespace spotvisor::http {

struct TlsFiles {
  std::filesystem::path ca;    // PEM CA certificates; empty: the system's trust store
  std::filesystem::path cert;  // PEM client certificate (chain); empty: no client certificate
  std::filesystem::path key;   // PEM private key of `cert`, unencrypted, mode 0600; set with `cert`
  bool empty() const { return ca.empty() && cert.empty() && key.empty(); }
};

// Which of TlsFiles an error is about; "ca", "cert", "key" (the config's words).
enum class TlsFile { kCa, kCert, kKey };
const char* ToString(TlsFile file);

// The checked contents of TlsFiles. Move-only; the key's bytes are wiped on destruction.
struct TlsMaterial {
  std::string ca_pem;    // "": trust the system's CAs
  std::string cert_pem;  // "": no client certificate
  std::string key_pem;   // a secret; set with cert_pem

  TlsMaterial() = default;
  ~TlsMaterial();
  TlsMaterial(TlsMaterial&&) = default;
  TlsMaterial& operator=(TlsMaterial&&) = default;
  TlsMaterial(const TlsMaterial&) = delete;
  TlsMaterial& operator=(const TlsMaterial&) = delete;
};

// Reads and checks the files: the CA file holds at least one certificate, the certificate
// file parses, the key file is accessible by its owner alone, is not encrypted and belongs
// to the certificate; `cert` and `key` come together. Messages name the file, never its
// content; `failed` (when given) is set to the file an error is about.
Result<TlsMaterial> LoadTlsFiles(const TlsFiles& files, TlsFile* failed = nullptr);

// An OpenSSL client context: TLS 1.2 or later, the server's certificate verified against
// the trusted CAs, the client certificate presented when there is one. Immutable once
// made; shared by every connection that uses it.
class TlsContext;

// Builds the context from checked material (defined in stream.cpp, the Asio SSL unit).
Result<std::shared_ptr<TlsContext>> MakeTlsContext(const TlsMaterial& material);

}  // namespace spotvisor::http
