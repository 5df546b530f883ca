// The single-node coordinator; see coordinator.hpp. Stateless.
#include "spotvisor/supervisor/coordinator.hpp"

namespace spotvisor::supervisor {

void LocalCoordinator::Propose(const ProposeResumeAction& proposal, AgreedHandler on_agreed) {
  GroupAgreedEvent agreed;
  if (!proposal.good.empty()) agreed.point = proposal.good.front();
  agreed.place.epoch = static_cast<std::uint64_t>(proposal.attempt);
  agreed.place.master_port = master_port_;
  on_agreed(std::move(agreed));
}

}  // namespace spotvisor::supervisor
