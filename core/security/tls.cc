#include "chorus/core/security/tls.h"

#include <errno.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <sys/socket.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "chorus/core/env.h"
#include "chorus/core/socket.h"
#include "chorus/core/status.h"

namespace chorus::security {
namespace {

// Drains this thread's OpenSSL error queue into one line.
std::string TakeOpenSslErrors() {
  std::vector<std::string> reasons;
  while (const unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    reasons.emplace_back(text);
  }
  return reasons.empty() ? "no OpenSSL error recorded" : absl::StrJoin(reasons, "; ");
}

// A BIO over a socket that sends with MSG_NOSIGNAL: OpenSSL's own socket BIO write()s, and a
// write to a peer that has gone raises SIGPIPE, which kills a process that did not ignore it
// (a library must not decide that for its host).
int BioWrite(BIO* bio, const char* data, int size) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  BIO_clear_retry_flags(bio);
  const ssize_t sent = send(fd, data, static_cast<size_t>(size), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(sent);
}

int BioRead(BIO* bio, char* into, int size) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  BIO_clear_retry_flags(bio);
  const ssize_t got = recv(fd, into, static_cast<size_t>(size), MSG_DONTWAIT);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_read(bio);
  }
  return static_cast<int>(got);
}

long BioControl(BIO*, int command, long, void*) { return command == BIO_CTRL_FLUSH ? 1 : 0; }

int BioCreate(BIO* bio) {
  BIO_set_init(bio, 1);
  return 1;
}

const BIO_METHOD* SocketBioMethod() {
  static BIO_METHOD* const method = [] {
    BIO_METHOD* created = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "chorus socket");
    BIO_meth_set_write(created, BioWrite);
    BIO_meth_set_read(created, BioRead);
    BIO_meth_set_ctrl(created, BioControl);
    BIO_meth_set_create(created, BioCreate);
    return created;
  }();
  return method;
}

}  // namespace

absl::StatusOr<std::optional<TlsFiles>> TlsFilesFromEnv() {
  const std::optional<std::string> certificate = GetEnv("CHORUS_TLS_CERT");
  const std::optional<std::string> key = GetEnv("CHORUS_TLS_KEY");
  const std::optional<std::string> ca = GetEnv("CHORUS_TLS_CA");
  if (!certificate && !key && !ca) return std::optional<TlsFiles>();
  std::vector<std::string> missing;
  if (!certificate) missing.push_back("CHORUS_TLS_CERT");
  if (!key) missing.push_back("CHORUS_TLS_KEY");
  if (!ca) missing.push_back("CHORUS_TLS_CA");
  if (!missing.empty()) {
    return InvalidArgumentError(absl::StrCat(
        "TLS needs a certificate, its key and a CA; ", absl::StrJoin(missing, " and "),
        missing.size() == 1 ? " is" : " are", " not set"));
  }
  return std::optional<TlsFiles>(TlsFiles{*certificate, *key, *ca});
}

absl::StatusOr<std::shared_ptr<TlsContext>> TlsContext::Create(const TlsFiles& files) {
  ERR_clear_error();
  SSL_CTX* context = SSL_CTX_new(TLS_method());
  if (context == nullptr) {
    return InternalError(absl::StrCat("SSL_CTX_new: ", TakeOpenSslErrors()));
  }
  std::shared_ptr<TlsContext> tls(new TlsContext(context, files));
  auto failed = [&](absl::string_view what, absl::string_view file) {
    return InvalidArgumentError(
        absl::StrCat("TLS: ", what, " ", file, ": ", TakeOpenSslErrors()));
  };
  if (SSL_CTX_set_min_proto_version(context, TLS1_2_VERSION) != 1) {
    return InternalError(absl::StrCat("TLS: cannot require TLS 1.2: ", TakeOpenSslErrors()));
  }
  if (SSL_CTX_use_certificate_chain_file(context, files.certificate.c_str()) != 1) {
    return failed("cannot load the certificate (CHORUS_TLS_CERT)", files.certificate);
  }
  if (SSL_CTX_use_PrivateKey_file(context, files.private_key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return failed("cannot load the private key (CHORUS_TLS_KEY)", files.private_key);
  }
  if (SSL_CTX_check_private_key(context) != 1) {
    return failed("the private key does not match the certificate; key", files.private_key);
  }
  if (SSL_CTX_load_verify_locations(context, files.ca.c_str(), nullptr) != 1) {
    return failed("cannot load the CA (CHORUS_TLS_CA)", files.ca);
  }
  // Mutual: a peer without a certificate the CA signed is refused, in either role.
  SSL_CTX_set_verify(context, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  // Links are long-lived and never resumed; no tickets to send or store.
  SSL_CTX_set_num_tickets(context, 0);
  // A peer that closes its socket without close_notify reads as a close, as on a plain link:
  // the framing above TLS knows whether a message was cut short.
  SSL_CTX_set_options(context,
                      SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_CTX_set_mode(context, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Records are read several at a time (one recv() instead of two per 16 KiB record).
  SSL_CTX_set_read_ahead(context, 1);
  SSL_CTX_set_default_read_buffer_len(context, 256 * 1024);
  // AES-128-GCM first: as strong as the job needs and the fastest with AES-NI.
  SSL_CTX_set_ciphersuites(context,
                           "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                           "TLS_CHACHA20_POLY1305_SHA256");
  // Checked here, so that a certificate another CA signed fails at start-up with its name, not
  // at the first connection as a refusal.
  X509_STORE_CTX* check = X509_STORE_CTX_new();
  X509* own = SSL_CTX_get0_certificate(context);
  const bool initialised =
      check != nullptr && X509_STORE_CTX_init(check, SSL_CTX_get_cert_store(context), own,
                                              nullptr) == 1;
  const bool verified = initialised && X509_verify_cert(check) == 1;
  const std::string reason =
      initialised ? X509_verify_cert_error_string(X509_STORE_CTX_get_error(check)) : "";
  X509_STORE_CTX_free(check);
  if (!verified) {
    return InvalidArgumentError(absl::StrCat("TLS: the certificate ", files.certificate,
                                             " is not accepted by the CA ", files.ca, ": ",
                                             reason));
  }
  return tls;
}

TlsContext::~TlsContext() { SSL_CTX_free(context_); }

absl::StatusOr<std::unique_ptr<TlsSession>> TlsContext::NewSession(int fd, Role role) const {
  ERR_clear_error();
  SSL* ssl = SSL_new(context_);
  if (ssl == nullptr) return InternalError(absl::StrCat("SSL_new: ", TakeOpenSslErrors()));
  std::unique_ptr<TlsSession> session(new TlsSession(ssl));
  BIO* bio = BIO_new(SocketBioMethod());
  if (bio == nullptr) return InternalError(absl::StrCat("BIO_new: ", TakeOpenSslErrors()));
  BIO_set_data(bio, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
  SSL_set_bio(ssl, bio, bio);  // the session owns it now
  if (role == Role::kClient) {
    SSL_set_connect_state(ssl);
  } else {
    SSL_set_accept_state(ssl);
  }
  return session;
}

TlsSession::~TlsSession() { SSL_free(ssl_); }

IoResult TlsSession::Outcome(int returned, const char* operation) {
  IoResult result;
  if (returned > 0) {
    result.bytes = static_cast<size_t>(returned);
    return result;
  }
  switch (SSL_get_error(ssl_, returned)) {
    case SSL_ERROR_WANT_READ:
      result.kind = IoResult::Kind::kWantRead;
      return result;
    case SSL_ERROR_WANT_WRITE:
      result.kind = IoResult::Kind::kWantWrite;
      return result;
    case SSL_ERROR_ZERO_RETURN:
      result.kind = IoResult::Kind::kClosed;
      return result;
    case SSL_ERROR_SYSCALL:
      if (errno == 0) {
        // The socket reached its end without close_notify: the peer closed it.
        ERR_clear_error();
        result.kind = IoResult::Kind::kClosed;
        return result;
      }
      result.kind = IoResult::Kind::kError;
      result.error_number = errno;
      result.error = absl::StrCat(operation, ": ", ErrnoText(errno));
      ERR_clear_error();
      return result;
    default: {
      result.kind = IoResult::Kind::kError;
      result.error = absl::StrCat(operation, ": ", TakeOpenSslErrors());
      const long verify = SSL_get_verify_result(ssl_);
      if (verify != X509_V_OK) {
        absl::StrAppend(&result.error, "; the peer's certificate: ",
                        X509_verify_cert_error_string(verify));
      }
      return result;
    }
  }
}

IoResult TlsSession::Handshake() {
  ERR_clear_error();
  errno = 0;
  const int returned = SSL_do_handshake(ssl_);
  IoResult result = Outcome(returned, "TLS handshake");
  if (result.kind == IoResult::Kind::kClosed) {
    result.kind = IoResult::Kind::kError;
    result.error = "TLS handshake: the peer closed the connection (does it use TLS?)";
  }
  if (result.kind == IoResult::Kind::kError && result.error_number == 0) {
    absl::StrAppend(&result.error,
                    "; every rank and the store need certificates that the same CHORUS_TLS_CA "
                    "signed");
  }
  return result;
}

IoResult TlsSession::Read(void* into, size_t size) {
  ERR_clear_error();
  errno = 0;
  size_t got = 0;
  const int ok = SSL_read_ex(ssl_, into, size, &got);
  if (ok == 1) return IoResult{IoResult::Kind::kDone, got, 0, {}};
  return Outcome(0, "TLS read");
}

IoResult TlsSession::Write(const void* from, size_t size) {
  ERR_clear_error();
  errno = 0;
  size_t sent = 0;
  const int ok = SSL_write_ex(ssl_, from, size, &sent);
  if (ok == 1) return IoResult{IoResult::Kind::kDone, sent, 0, {}};
  return Outcome(0, "TLS write");
}

bool TlsSession::HasBufferedInput() const { return SSL_has_pending(ssl_) == 1; }

void TlsSession::Shutdown() {
  ERR_clear_error();
  (void)SSL_shutdown(ssl_);
  ERR_clear_error();
}

std::string TlsSession::PeerSubject() const {
  X509* peer = SSL_get1_peer_certificate(ssl_);
  if (peer == nullptr) return "";
  char text[256];
  X509_NAME_oneline(X509_get_subject_name(peer), text, sizeof(text));
  X509_free(peer);
  return text;
}

}  // namespace chorus::security
