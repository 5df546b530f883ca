// The coordinator of a multi-node job (coordination.etcd set): one spotvisor per node, each
// holding a rank under its etcd lease, agreeing on every start (all `nodes` ranks joined
// the same epoch; the newest step good on every node) and stopping together (the first stop
// of an epoch, written once; a member whose lease lapses). Keys and records: records.hpp.
// etcd trouble never stops training: it is logged, and the coordinator keeps trying.
// io_context thread.
#pragma once

#include <memory>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/coordination/records.hpp"
#include "spotvisor/supervisor/coordinator.hpp"
#include "spotvisor/util/clock.hpp"
#include "spotvisor/util/result.hpp"

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace spotvisor::coordination {

// Checks the endpoints and reads the credentials file (it must not be readable by others);
// connects to nothing yet. Its retries, lease renewals and the wall times it writes run on
// `clock` (the host's), which outlives it.
Result<std::unique_ptr<supervisor::Coordinator>> MakeEtcdCoordinator(boost::asio::io_context& io, Clock& clock,
                                                                     const config::JobConfig& job);

// One read of the job's group (members, joins, the epoch, the stops) at one revision, for
// `spotvisor status`; an error names the endpoints.
Result<GroupView> ReadGroup(const config::JobConfig& job);

}  // namespace spotvisor::coordination
