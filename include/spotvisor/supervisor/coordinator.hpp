// Who decides where a start begins: the group (issue 14: peers through etcd) or, for a
// single node, this node alone. The Fsm proposes its good steps (ProposeResumeAction); the
// coordinator answers with the agreed point and this node's place (GroupAgreedEvent). Pure
// interface; called on the driver's io thread. Stop and peer events come with issue 14.
#pragma once

#include <functional>

#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor {

class Coordinator {
 public:
  using AgreedHandler = std::function<void(GroupAgreedEvent)>;
  virtual ~Coordinator() = default;
  // Offers `proposal` for the next start; `on_agreed` is called once with the group's
  // choice, possibly before Propose returns (the caller must not re-enter the Fsm from it).
  virtual void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) = 0;
};

// A group of one: agrees at once with the newest good step, rank 0 of 1, and the attempt
// number as the epoch (new for every start, across supervisor restarts too).
class LocalCoordinator final : public Coordinator {
 public:
  void Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) override;
};

}  // namespace spotvisor::supervisor
