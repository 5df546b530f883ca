// The grace a notice leaves; see notice_grace.hpp.
#include "spotvisor/supervisor/notice_grace.hpp"

namespace spotvisor::supervisor {

NoticeGrace GraceForNotice(std::optional<std::chrono::milliseconds> until_deadline, const config::ProviderSection& p) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  NoticeGrace g;
  g.window = until_deadline.value_or(duration_cast<milliseconds>(p.default_window));
  g.cap = g.window - duration_cast<milliseconds>(p.safety_margin);
  if (g.cap < p.min_grace) {
    g.cap = duration_cast<milliseconds>(p.min_grace);
    g.deadline_near = true;
  }
  return g;
}

}  // namespace spotvisor::supervisor
