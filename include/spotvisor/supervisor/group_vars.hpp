// A start's place in the group (GroupPlace: rank, nodes, master, epoch) as the trainer and
// the hooks get it: the {node_rank}, {nnodes}, {master_addr}, {master_port} and {epoch}
// templates, and the SPOTVISOR_NODE_RANK, _NNODES, _EPOCH, _MASTER_ADDR, _MASTER_PORT
// environment. A single node is rank 0 of 1, its own master, the attempt as the epoch. Pure.
#pragma once

#include <map>
#include <string>

#include "spotvisor/config/templates.hpp"
#include "spotvisor/supervisor/fsm.hpp"

namespace spotvisor::supervisor {

config::TemplateVars GroupVars(const GroupPlace& place);
std::map<std::string, std::string> GroupEnvironment(const GroupPlace& place);

}  // namespace spotvisor::supervisor
