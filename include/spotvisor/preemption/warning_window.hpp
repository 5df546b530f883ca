// How long each provider warns before it takes a spot VM away: the time a trainer has to
// save and spotvisor to make that save durable. Pure, any thread.
#pragma once

#include <string>

#include "spotvisor/config/job_config.hpp"

namespace spotvisor::preemption {

// aws 120 s, gcp 30 s, azure 30 s (Scheduled Events' minimum), alibaba 300 s; others
// (file, slurm, none): provider.default_window. `provider` as ToString(ProviderKind) spells it.
Duration WarningWindow(const std::string& provider, const config::ProviderSection& section);

}  // namespace spotvisor::preemption
