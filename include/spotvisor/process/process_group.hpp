// Facts about processes and process groups read from the kernel (/proc, kill(2)), used to
// signal the trainer's group, to know when it is gone, and to find a leftover of a child
// started by a supervisor that was SIGKILLed. Any thread; no state.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace spotvisor::process {

// Who a started child was, so that a later supervisor can recognise it (pids get reused).
struct ChildIdentity {
  pid_t pid = 0;                  // also the process group id
  std::uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22
  std::string boot_id;            // /proc/sys/kernel/random/boot_id
};

// The fields of /proc/<pid>/stat spotvisor reads.
struct ProcStat {
  char state = '?';               // field 3: R, S, D, T, Z...
  pid_t ppid = 0;                 // field 4
  pid_t pgrp = 0;                 // field 5
  std::uint64_t cpu_ticks = 0;    // fields 14 + 15: user + system time, in clock ticks
  std::uint64_t start_ticks = 0;  // field 22
};

// nullopt when `pid` is gone.
std::optional<ProcStat> ReadProcStat(pid_t pid);

// Every pid in /proc at this moment.
std::vector<pid_t> AllPids();

// kill(2) on the group or on one process; false (errno kept) when it failed.
bool SignalGroup(pid_t pgid, int signo);
bool SignalProcess(pid_t pid, int signo);

// True while any process (zombies included) is in the group.
bool GroupExists(pid_t pgid);

// The live (non-zombie) processes of the group, from /proc.
std::vector<pid_t> GroupMembers(pid_t pgid);

// The files under `dir` that a live process of group `pgid` (or a descendant of its leader)
// holds open for writing
// (O_WRONLY or O_RDWR), as /proc/<pid>/fd and fdinfo show them, by their canonical paths.
// Whatever cannot be read counts as not open: a caller must not depend on it for
// correctness (the mirror uploads a closed file early, and checks every byte afterwards).
std::set<std::filesystem::path> OpenForWriting(pid_t pgid, const std::filesystem::path& dir);

// What `pid` is doing, for a log line: "1234 python S futex_wait_queue" (pid, command
// name, state, and the kernel function it waits in where /proc shows it); "1234 gone".
std::string DescribeProcess(pid_t pid);
// Where `pid`'s main thread sleeps in the kernel ("wait_woken", "futex_wait_queue",
// "hrtimer_nanosleep"...); empty while it runs, when it is gone or the kernel hides it.
std::string WaitChannel(pid_t pid);

// The start time of `pid` in clock ticks since boot; nullopt when it does not exist.
std::optional<std::uint64_t> StartTicks(pid_t pid);

std::string BootId();

// Identity of a child we just started.
ChildIdentity Identify(pid_t pid);

// Live processes of the group that `child` created, provided it is really that group
// (same boot, and the leader is either gone or still the same process). Empty otherwise.
std::vector<pid_t> FindLeftovers(const ChildIdentity& child);

}  // namespace spotvisor::process
