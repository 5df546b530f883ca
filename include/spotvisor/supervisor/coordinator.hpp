// Who decides where a start begins and who hears of a stop: the group (a multi-node job:
// peers through etcd, src/coordination/) or, for a single node, this node alone. The Fsm
// proposes its good steps (ProposeResumeAction); the coordinator answers with the agreed
// point and this node's place (GroupAgreedEvent). The Fsm publishes each stop of its own
// (PublishStopAction); a peer's stop comes back as a StopRequestedEvent with
// StopReason::kPeer. Called on the driver's io thread.
#pragma once

#include <functional>
#include <string>

#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor {

class Coordinator {
 public:
  using AgreedHandler = std::function<void(GroupAgreedEvent)>;
  using PeerStopHandler = std::function<void(StopRequestedEvent)>;
  using FinishedHandler = std::function<void()>;
  using SpareHandler = std::function<void(GroupSpareEvent)>;
  using CutOffHandler = std::function<void()>;
  using GrowHandler = std::function<void(const std::string& detail)>;
  // Where the group's news goes (a single node has none of it).
  struct Handlers {
    PeerStopHandler on_peer_stop;  // a peer stopped, or this node's rank was taken: stop the trainer
    SpareHandler on_spare;         // this node waits as a spare, or took a lost rank
    CutOffHandler on_cut_off;      // this node's lease lapsed while its trainer ran (GroupCutOffEvent)
    FinishedHandler on_finished;   // every rank's trainer succeeded while this node waited as a spare
    GrowHandler on_grow;           // a node joined the running, shrunken group (GroupGrowingEvent)
  };
  virtual ~Coordinator() = default;
  // Once, before the first Propose.
  virtual void Start(Handlers handlers) { (void)handlers; }
  // Offers `proposal` for the next start; `on_agreed` is called once with the group's
  // choice, possibly before Propose returns (the caller must not re-enter the Fsm from it).
  virtual void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) = 0;
  // This node's trainer is stopping or failed: every peer's stops too.
  virtual void PublishStop(const PublishStopAction& stop) { (void)stop; }
  // This node's trainer succeeded in the running epoch: `on_finished` is called once every
  // node's has (possibly before PublishDone returns; the same rule as Propose's). A peer's
  // stop meanwhile comes as usual, through the PeerStopHandler. A group of one: at once.
  virtual void PublishDone(FinishedHandler on_finished) { on_finished(); }
  // Drained with spares: give up this node's rank (and stop waiting as a spare) until the
  // next Propose, which claims a rank again or waits as a spare.
  virtual void ReleaseRank() {}
  // The supervisor exits: give up this node's place now rather than when its lease lapses;
  // `finished`: its trainer succeeded (the job is done here), which the peers must not take
  // for a node lost. Whatever it starts finishes on the io_context, within request timeouts.
  virtual void Leave(bool finished) { (void)finished; }
  // This node is certainly still a member of the group it last joined: its lease has not run
  // out (a node stopped or starved past its lease may have been left behind by the others).
  // io thread. A group of one: always.
  virtual bool MemberForSure() const { return true; }
};

// A group of one: agrees at once with the newest good step, rank 0 of 1, its own master,
// and the attempt number as the epoch (new for every start, across supervisor restarts).
class LocalCoordinator final : public Coordinator {
 public:
  explicit LocalCoordinator(int master_port = 29500) : master_port_(master_port) {}
  void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) override;

 private:
  int master_port_;  // coordination.master_port
};

}  // namespace spotvisor::supervisor
