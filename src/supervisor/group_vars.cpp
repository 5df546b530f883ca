// A start's place in the group, as templates and environment; see group_vars.hpp.
#include "spotvisor/supervisor/group_vars.hpp"

namespace spotvisor::supervisor {

config::TemplateVars GroupVars(const GroupPlace& place) {
  return {{"node_rank", std::to_string(place.rank)},
          {"nnodes", std::to_string(place.world)},
          {"master_addr", place.master_addr},
          {"master_port", std::to_string(place.master_port)},
          {"epoch", std::to_string(place.epoch)}};
}

std::map<std::string, std::string> GroupEnvironment(const GroupPlace& place) {
  return {{"SPOTVISOR_NODE_RANK", std::to_string(place.rank)},
          {"SPOTVISOR_NNODES", std::to_string(place.world)},
          {"SPOTVISOR_EPOCH", std::to_string(place.epoch)},
          {"SPOTVISOR_MASTER_ADDR", place.master_addr},
          {"SPOTVISOR_MASTER_PORT", std::to_string(place.master_port)}};
}

}  // namespace spotvisor::supervisor
