// One socket of a connection: dialing it (connect, TLS handshake when the job uses TLS, the job
// secret's challenge-response, send the Hello, read the Reply), writing queued frames and reading
// frames into the destinations the connection chooses. All I/O goes through a security::Channel,
// plain or TLS. All methods run with the engine's mutex held; not thread-safe on its own.
#ifndef CHORUS_TRANSPORT_TCP_STREAM_H_
#define CHORUS_TRANSPORT_TCP_STREAM_H_

#include <sys/epoll.h>

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "chorus/core/deadline.h"
#include "chorus/core/security/auth_exchange.h"
#include "chorus/core/security/channel.h"
#include "chorus/core/socket.h"
#include "chorus/transport/tcp/congestion.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/transport/tcp/message.h"
#include "chorus/transport/tcp/progress_engine.h"
#include "chorus/transport/tcp/wire_format.h"

namespace chorus::tcp {

class Stream;

// What to do with a frame's payload.
struct FrameTarget {
  enum class Action {
    kDeliver,  // into `message` (at the frame's offset)
    kPause,    // the frame belongs to a message not announced yet: stop reading this stream
    kStop,     // the owner failed the connection (protocol error); the stream is closed
  };
  Action action = Action::kDeliver;
  std::shared_ptr<InboundMessage> message;  // null with kDeliver: a frame without payload
};

// The connection a stream reports to. Called with the engine's mutex held.
class StreamOwner {
 public:
  virtual ~StreamOwner() = default;
  // A dialing stream got its handshake reply, or its dial failed (an error saying why; worth
  // retrying: the peer may not be up yet).
  virtual void OnDialResult(Stream& stream, absl::StatusOr<HandshakeVerdict> result) = 0;
  // A dialing stream's link could not be secured: the peer refused this process's certificate or
  // job secret, or failed to prove its own. Retrying cannot help.
  virtual void OnDialRefused(Stream& stream, absl::string_view why) = 0;
  virtual FrameTarget OnFrameHeader(Stream& stream, const FrameHeader& header) = 0;
  // Every byte of `message` has arrived.
  virtual void OnMessageComplete(const std::shared_ptr<InboundMessage>& message) = 0;
  // An open stream broke: a socket error, a malformed frame, or a TLS record that failed its
  // integrity check (`tampered`: the bytes were changed on the way, the peer is not to blame).
  virtual void OnStreamFailed(Stream& stream, absl::string_view why, bool tampered) = 0;
  // The peer closed an open stream (which is now closed); `mid_frame` if it stopped in the
  // middle of a frame. Data read before the EOF has been delivered.
  virtual void OnStreamEof(Stream& stream, bool mid_frame) = 0;
};

class Stream : public EventHandler {
 public:
  enum class State {
    kConnecting,
    kSecuring,  // TLS handshake, then the job secret's challenge-response
    kSendingHello,
    kAwaitingReply,
    kOpen,
    kClosed,
  };

  // A stream whose connect (StartConnect) is under way on `channel`'s socket; it secures the
  // link (proving `auth_key` when not null), sends `hello` and awaits the reply, all before
  // `handshake_deadline`.
  static std::unique_ptr<Stream> Dial(StreamOwner* owner, ProgressEngine* engine, int index,
                                      security::Channel channel, const security::AuthKey* auth_key,
                                      const Hello& hello, Deadline handshake_deadline,
                                      uint64_t max_message_bytes);
  // A stream whose handshake the acceptor completed.
  static std::unique_ptr<Stream> Accepted(StreamOwner* owner, ProgressEngine* engine, int index,
                                          security::Channel channel, uint64_t max_message_bytes);
  ~Stream() override;

  int index() const { return index_; }
  State state() const { return state_; }
  bool open() const { return state_ == State::kOpen; }
  // Its handle in the progress engine (ProgressEngine::Register).
  uint64_t token() const { return token_; }
  // Open and waiting only to read: nothing of its sends waits for the socket (engine's mu()).
  bool OnlyReads() const override { return state_ == State::kOpen && interest_ == EPOLLIN; }
  // Dialing and past its handshake deadline.
  bool HandshakeExpired() const;

  // Queues a frame; call Flush() after queueing.
  void Enqueue(OutFrame frame);
  // From now on the socket's congestion control follows the size of each frame queued
  // (SizeSwitchedCongestion).
  void SwitchCongestionBySize() { congestion_by_size_.emplace(channel_.fd()); }
  // Writes queued frames until the socket is full or `budget` bytes are written; the rest goes
  // out as the socket becomes writable. A posting thread writes once (one sendmsg, whatever
  // the socket takes) and leaves the rest to the driver.
  void Flush(size_t budget);
  static constexpr size_t kSingleWrite = 1;  // a budget that allows exactly one sendmsg
  std::deque<OutFrame>& send_queue() { return send_queue_; }

  // A stream paused on a frame of a message not yet announced; Resume once it is.
  bool paused() const { return paused_header_.has_value(); }
  uint64_t paused_seq() const { return paused_header_ ? paused_header_->seq : 0; }
  void Resume();

  // Unregisters and closes the socket. Queued frames stay for the owner to fail. Idempotent.
  void Close();

  void OnEvents(uint32_t events) override;

 private:
  Stream(StreamOwner* owner, ProgressEngine* engine, int index, security::Channel channel,
         State state, Deadline handshake_deadline, uint64_t max_message_bytes);

  void Secure();
  void SendHello();
  void ReadReply();
  void DialFailed(absl::string_view why);
  void DialRefused(absl::string_view why);
  // The dial's I/O step `result` blocked or failed (reported to the owner); false if it did
  // neither and the dial goes on.
  bool DialStepStopped(const security::IoResult& result, absl::string_view step);
  void ReadFrames();
  // Receives into the staging buffer; false when the socket has nothing (or failed).
  bool FillStaging();
  void HandleHeader(const FrameHeader& header);
  // `count` payload bytes of the current frame have arrived (copied from `from` unless null).
  // A payload going to a sink is handed over in pieces.
  void AccountBody(const uint8_t* from, size_t count);
  uint8_t* SinkBuffer();
  void Fail(absl::string_view why, bool tampered = false);
  void Eof();
  // True while a frame has started arriving and is not complete.
  bool MidFrame() const;
  // A read did not complete: wait for the event it needs, or end the stream.
  void ReadStopped(const security::IoResult& result);
  // A read failed (not "would block").
  void RecvFailed(const security::IoResult& result);
  void UpdateInterest();

  StreamOwner* const owner_;
  ProgressEngine* const engine_;
  const int index_;
  security::Channel channel_;
  uint64_t token_ = 0;
  uint32_t interest_ = 0;
  State state_;
  const Deadline handshake_deadline_;
  const uint64_t max_message_bytes_;

  // Handshake (dialing only).
  // The socket event securing the link waits for.
  uint32_t dial_wants_ = 0;
  std::unique_ptr<security::AuthExchange> auth_;
  std::array<uint8_t, kHelloSize> hello_{};
  size_t hello_sent_ = 0;
  std::array<uint8_t, kReplySize> reply_{};
  size_t reply_received_ = 0;

  std::deque<OutFrame> send_queue_;
  std::optional<SizeSwitchedCongestion> congestion_by_size_;
  // Under TLS a read may need the socket writable, or a write readable, first.
  bool read_wants_write_ = false;
  bool write_wants_read_ = false;

  // Incoming bytes not yet parsed: staging_[staged_begin_, staged_end_).
  std::unique_ptr<uint8_t[]> staging_;
  size_t staged_begin_ = 0;
  size_t staged_end_ = 0;
  // The frame whose payload is arriving.
  std::shared_ptr<InboundMessage> body_;
  size_t body_frame_ = 0;  // this frame's entry in body_->frames
  uint64_t body_offset_ = 0;
  uint64_t body_remaining_ = 0;
  // A frame of a message going to a receive's sink (InboundMessage::to_sink) is read into
  // this buffer and handed over from it; it holds sink_fill_ bytes not yet handed over (less
  // than RecvSink::kAlignment between reads). Allocated on first use.
  std::unique_ptr<uint8_t[]> sink_buffer_;
  size_t sink_fill_ = 0;
  std::optional<FrameHeader> paused_header_;
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_STREAM_H_
