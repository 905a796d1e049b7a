// TLS for TCP links, with OpenSSL: a context made from the job's certificate, key and CA
// (CHORUS_TLS_CERT, CHORUS_TLS_KEY, CHORUS_TLS_CA), and sessions over non-blocking sockets.
// Authentication is mutual: each end presents its certificate and accepts only a peer whose
// certificate the CA signed. Host names are not checked (ranks dial addresses from the store);
// the CA is the boundary of the job.
#ifndef CHORUS_CORE_SECURITY_TLS_H_
#define CHORUS_CORE_SECURITY_TLS_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "chorus/core/security/io_result.h"

// OpenSSL's types, declared so that only tls.cc includes OpenSSL.
typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace chorus::security {

struct TlsFiles {
  std::string certificate;  // PEM: this process's certificate (chain)
  std::string private_key;  // PEM: its private key
  std::string ca;           // PEM: the CA(s) whose certificates are members of the job
};

// The files the environment names, or nullopt when none of the three is set. InvalidArgument
// naming what is missing when only some are.
absl::StatusOr<std::optional<TlsFiles>> TlsFilesFromEnv();

// One TLS connection over a socket the caller owns. Thread-compatible.
class TlsSession {
 public:
  ~TlsSession();
  TlsSession(const TlsSession&) = delete;
  TlsSession& operator=(const TlsSession&) = delete;

  // Errors carry OpenSSL's reason, and the certificate check's where that failed.
  // Advances the handshake; kDone once both ends are authenticated.
  IoResult Handshake();
  IoResult Read(void* into, size_t size);
  // Writes one or more records of `from` (partial writes allowed). After kWantRead or
  // kWantWrite, the next call must offer at least the same bytes, from any address.
  IoResult Write(const void* from, size_t size);
  // Decrypted or received bytes held inside the session, which no socket event announces.
  bool HasBufferedInput() const;
  // Sends close_notify, without waiting for the peer's.
  void Shutdown();
  // The peer certificate's subject, e.g. "CN=rank-1"; empty before the handshake.
  std::string PeerSubject() const;

 private:
  friend class TlsContext;
  explicit TlsSession(SSL* ssl) : ssl_(ssl) {}
  IoResult Outcome(int returned, const char* operation);

  SSL* const ssl_;
};

// Thread-safe: sessions are created from any thread.
class TlsContext {
 public:
  // Loads and checks the files: the key matches the certificate, the certificate is signed by
  // the CA. InvalidArgument naming the file and OpenSSL's reason otherwise.
  static absl::StatusOr<std::shared_ptr<TlsContext>> Create(const TlsFiles& files);
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  enum class Role { kClient, kServer };
  // A session over `fd` (a connected, non-blocking socket the caller keeps owning).
  absl::StatusOr<std::unique_ptr<TlsSession>> NewSession(int fd, Role role) const;

  const TlsFiles& files() const { return files_; }

 private:
  TlsContext(SSL_CTX* context, TlsFiles files) : context_(context), files_(std::move(files)) {}

  SSL_CTX* const context_;
  const TlsFiles files_;
};

}  // namespace chorus::security

#endif  // CHORUS_CORE_SECURITY_TLS_H_
