// The listening socket of a TCP device and the accepted sockets whose handshake is not complete:
// the TLS handshake when the job uses TLS, the job secret's challenge-response, then the Hello.
// A complete Hello is routed by its mesh id to the mesh, which decides; everything malformed,
// unauthenticated, foreign or late is refused, logged with the remote address and closed
// without touching any mesh.
#ifndef CHORUS_TRANSPORT_TCP_ACCEPTOR_H_
#define CHORUS_TRANSPORT_TCP_ACCEPTOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "chorus/core/deadline.h"
#include "chorus/transport/tcp/handshake.h"
#include "chorus/transport/tcp/progress_engine.h"
#include "chorus/core/socket.h"
#include "chorus/transport/tcp/device_state.h"

namespace chorus::tcp {

class TcpMesh;

// Every method, the constructor and the destructor run with the engine's mutex held.
class Acceptor : public EventHandler, public Tickable {
 public:
  Acceptor(DeviceState* context, ScopedFd listener);
  ~Acceptor() override;

  void OnEvents(uint32_t events) override;
  absl::Duration Tick() override;
  // Mesh `mesh_id` became ready: answer the handshakes that were waiting for it.
  void MeshReady(uint64_t mesh_id);

 private:
  class Handshake;
  friend class Handshake;

  void OnHandshakeEvents(Handshake& handshake);
  // Advances securing the link (security::DriveSecuring); true once it is done.
  bool Secure(Handshake& handshake);
  // Waits for the event `result` needs, or refuses the connection; false if it did neither.
  bool StepStopped(Handshake& handshake, const security::IoResult& result,
                   absl::string_view step);
  void ReadHello(Handshake& handshake);
  void OnHello(Handshake& handshake);
  void Decide(Handshake& handshake, TcpMesh& mesh);
  // Closes and forgets `handshake` (freed after the current poll pass).
  void Drop(Handshake& handshake);
  void PauseAccepting();

  DeviceState* const context_;
  ProgressEngine& engine_;
  ScopedFd listener_;
  uint64_t token_ = 0;
  Deadline accept_paused_until_ = Deadline::Infinite();
  bool accept_paused_ = false;
  std::vector<std::unique_ptr<Handshake>> pending_;
};

}  // namespace chorus::tcp

#endif  // CHORUS_TRANSPORT_TCP_ACCEPTOR_H_
