// `provider.kind: file`: the appearance of `provider.file` is a notice (on-prem schedulers,
// rehearsals, tests); its removal clears it. Optional JSON content sets deadline, kind and
// action. Polled at the poll interval of `clock`. io thread only.
#pragma once

#include <filesystem>

#include "spotvisor/util/clock.hpp"
#include "watcher_support.hpp"

namespace spotvisor::preemption {

class FileWatcher final : public WatcherBase {
 public:
  FileWatcher(boost::asio::io_context& io, Clock& clock, const config::ProviderSection& cfg);

 private:
  void OnStart() override;
  void OnStop() override;
  void Poll();
  Notice Read(const std::filesystem::file_time_type& mtime);

  Clock& clock_;                  // the host's: polls, the default deadline
  std::unique_ptr<Timer> timer_;  // the next look
  config::ProviderSection cfg_;   // file, interval, window
  ConditionLog condition_;        // unreadable path, bad content
};

}  // namespace spotvisor::preemption
