// When to ask the trainer for the next checkpoint: a fixed period, or the Daly optimum
// from the measured blocking cost C (median of the recent request → good checkpoint
// times, plus the upload when save + upload does not fit the warning window) and the mean time between interruptions M
// (a prior, updated by the interruptions this job has seen), clamped to [min, max]. Pure state, no clock: callers pass
// durations. Single-threaded (the io thread).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "spotvisor/config/job_config.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::cadence {

class CadencePolicy {
 public:
  // `mtbi_prior`: the provider's prior M (see MtbiPriorFor).
  CadencePolicy(const config::CadenceSection& cadence, Duration mtbi_prior);

  // A measured checkpoint: request → new good checkpoint. Keeps the last kCostWindow.
  void ObserveCost(Duration cost);
  // A trainer run of `length` ended; `interrupted` when it was preempted, crashed or hung.
  void ObserveRun(Duration length, bool interrupted);
  // The mirror's planner, after an upload. When save + upload does not fit the warning
  // window, a checkpoint protects the job only once it is durable: the upload's time counts
  // in C, so that the newest durable checkpoint stays as recent as Daly's rule allows and no
  // checkpoint is asked for that could not be uploaded before the next (nullopt: it fits, C
  // is the save alone). True when what counts changed (a new verdict, or the upload time
  // moved by more than a quarter).
  bool ObserveUpload(std::optional<Duration> upload);

  // The interval to wait now: `every` (fixed), or clamp(Daly(C, M)) (adaptive; `min`
  // until a first cost has been measured, so that there is one to measure).
  Duration Interval() const;
  // The blocking cost (median of the recent measurements), if any.
  std::optional<Duration> Cost() const;
  // C as the interval uses it: Cost() plus the upload while it counts (ObserveUpload).
  std::optional<Duration> DurableCost() const;
  std::optional<Duration> upload_counted() const { return upload_; }
  // M = (prior + observed run time) / (1 + interruptions): the prior counts as one
  // interruption's worth of evidence (a Gamma prior on the interruption rate).
  Duration Mtbi() const;
  // Measured checkpoint cost as a percentage of `elapsed` run time (0 when elapsed is 0).
  double OverheadPercent(Duration elapsed) const;
  // The expected waste at the current C and M, in percent (adaptive only makes it optimal).
  std::optional<double> ExpectedWastePercent() const;
  // "C=30s M=3h interval=13m5s" for logs.
  std::string Describe() const;

  int interruptions() const { return interruptions_; }
  Duration observed() const { return observed_; }
  Duration total_cost() const { return total_cost_; }
  static constexpr std::size_t kCostWindow = 5;

 private:
  config::CadenceSection cadence_;  // mode, every, min, max
  Duration prior_;                  // the prior M
  std::deque<Duration> costs_;      // the last kCostWindow measured costs
  Duration total_cost_{0};          // every measured cost, summed (overhead)
  Duration observed_{0};            // trainer run time seen (this job, all supervisors)
  int interruptions_ = 0;           // preemptions, crashes and hangs seen
  std::optional<Duration> upload_;  // counted in C: save + upload does not fit the window
};

// The prior M for this job's provider: cadence.mtbi_priors[provider] when set, else
// cadence.mtbi_prior. `provider` is "aws", "gcp", "azure", "alibaba", "file" or "none".
Duration MtbiPriorFor(const config::CadenceSection& cadence, const std::string& provider);

}  // namespace spotvisor::cadence
