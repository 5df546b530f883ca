// `spotvisor mock-metadata`: runs the fake AWS/GCP/Azure/Alibaba metadata server in the
// foreground until SIGINT or SIGTERM (rehearsals, tests, demos). The server itself lives
// in src/mock/; this file parses flags, writes the port file and owns the signal set.
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <tuple>

#include "commands.hpp"
#include "spotvisor/cli/app.hpp"
#include "spotvisor/mock/mock_metadata_server.hpp"
#include "spotvisor/util/units.hpp"

namespace spotvisor::cli {
namespace {

struct MockMetadataFlags {
  std::string provider;                       // --provider
  std::string listen = "127.0.0.1:1338";      // --listen host:port
  std::string port_file;                      // --port-file
  std::string preempt_after;                  // --preempt-after
  std::string action = "terminate";           // --action
  bool imdsv2_required = false;               // --imdsv2-required
  bool gke_workload_identity = false;         // --gke-workload-identity
  std::string vm_name = "spotvisor-mock-vm";  // --vm-name
  int azure_rate_limit = 5;                   // --azure-rate-limit
  std::string flap;                           // --flap
  std::string flap_for;                       // --flap-for
};

// "127.0.0.1:0", "[::1]:8080" -> host and port.
Result<std::pair<std::string, std::uint16_t>> SplitListen(const std::string& listen) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == listen.size()) {
    return Error{"--listen '" + listen + "': expected host:port, e.g. 127.0.0.1:0"};
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port_text = listen.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port_text) > 65535) {
    return Error{"--listen '" + listen + "': bad port"};
  }
  return std::make_pair(host, static_cast<std::uint16_t>(std::stoul(port_text)));
}

// Writes the port next to `path` and renames it into place, so a reader never sees half.
Status WritePortFile(const std::filesystem::path& path, std::uint16_t port) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) return Error{"cannot write " + tmp.string()};
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Error{"cannot rename " + tmp.string() + " to " + path.string() + ": " + ec.message()};
  return Ok{};
}

int RunMockMetadata(const MockMetadataFlags& flags) {
  auto provider = mock::ParseMockProvider(flags.provider);
  if (!provider) {
    std::fprintf(stderr, "spotvisor: --provider: %s\n", provider.error().message.c_str());
    return exit_code::kUsage;
  }
  auto listen = SplitListen(flags.listen);
  if (!listen) {
    std::fprintf(stderr, "spotvisor: %s\n", listen.error().message.c_str());
    return exit_code::kUsage;
  }
  mock::MockOptions options;
  options.listen_host = listen->first;
  options.listen_port = listen->second;
  options.action = flags.action;
  options.imdsv2_required = flags.imdsv2_required;
  options.gke_workload_identity = flags.gke_workload_identity;
  options.vm_name = flags.vm_name;
  options.azure_rate_limit = flags.azure_rate_limit;
  for (const auto& [name, text, target] : {std::tuple{"--preempt-after", &flags.preempt_after, &options.preempt_after},
                                           std::tuple{"--flap", &flags.flap, &options.flap},
                                           std::tuple{"--flap-for", &flags.flap_for, &options.flap_for}}) {
    if (text->empty()) continue;
    auto parsed = ParseDuration(*text);
    if (!parsed || parsed->count() <= 0) {
      std::fprintf(stderr, "spotvisor: %s: %s\n", name,
                   parsed ? ("'" + *text + "' must be longer than 0").c_str() : parsed.error().message.c_str());
      return exit_code::kUsage;
    }
    *target = *parsed;
  }
  if (options.flap_for && !options.flap) {
    std::fprintf(stderr, "spotvisor: --flap-for needs --flap\n");
    return exit_code::kUsage;
  }
  boost::asio::io_context io;
  mock::MockMetadataServer server(io, *provider, options);
  auto port = server.Start();
  if (!port) {
    std::fprintf(stderr, "spotvisor: %s\n", port.error().message.c_str());
    return exit_code::kFailed;
  }
  if (!flags.port_file.empty()) {
    if (auto written = WritePortFile(flags.port_file, *port); !written) {
      std::fprintf(stderr, "spotvisor: --port-file: %s\n", written.error().message.c_str());
      return exit_code::kFailed;
    }
  }
  std::printf("spotvisor mock-metadata: %s metadata on %s (POST %s/__spotvisor/preempt to flip)\n",
              mock::ToString(*provider), server.url().c_str(), server.url().c_str());
  std::fflush(stdout);
  boost::asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&server](const boost::system::error_code& ec, int) {
    if (!ec) server.Stop();
  });
  io.run();
  return exit_code::kDone;
}

}  // namespace

void AddMockMetadataCommand(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<MockMetadataFlags>();
  CLI::App* cmd = app.add_subcommand(
      "mock-metadata", "Serve a fake AWS/GCP/Azure/Alibaba metadata endpoint that can be told to preempt");
  cmd->add_option("--provider", flags->provider, "aws | gcp | azure | alibaba")
      ->required()
      ->check(CLI::IsMember({"aws", "gcp", "azure", "alibaba"}));
  cmd->add_option("--listen", flags->listen, "address:port to listen on; port 0 picks a free one")
      ->capture_default_str();
  cmd->add_option("--port-file", flags->port_file, "write the bound port here (atomically)");
  cmd->add_option("--preempt-after", flags->preempt_after, "flip to preempted by itself after this long (e.g. 30s)");
  cmd->add_option("--action", flags->action, "aws instance-action: terminate | stop | hibernate")
      ->check(CLI::IsMember({"terminate", "stop", "hibernate"}))
      ->capture_default_str();
  cmd->add_flag("--imdsv2-required", flags->imdsv2_required,
                "aws/alibaba: refuse GETs without a valid session token (401)");
  cmd->add_flag("--gke-workload-identity", flags->gke_workload_identity,
                "gcp: answer as the GKE metadata server does to a pod: instance/preempted and "
                "instance/maintenance-event are 404");
  cmd->add_option("--vm-name", flags->vm_name, "azure: this VM's name")->capture_default_str();
  cmd->add_option("--azure-rate-limit", flags->azure_rate_limit, "azure: requests per second before 429 (0 = off)")
      ->capture_default_str();
  cmd->add_option("--flap", flags->flap,
                  "misbehave in turn every PERIOD (e.g. 2s): healthy, connection dropped, no answer, "
                  "200 with garbage, 503, not HTTP; control paths always answer");
  cmd->add_option("--flap-for", flags->flap_for, "stop flapping after this long (with --flap), e.g. 60s");
  cmd->footer(
      "Control (any provider):\n"
      "  curl -X POST http://HOST:PORT/__spotvisor/preempt [-d "
      "'{\"action\":\"stop\",\"deadline_in_s\":90}']\n"
      "  curl -X POST http://HOST:PORT/__spotvisor/clear\n"
      "  curl http://HOST:PORT/__spotvisor/state\n"
      "Preempt body keys: action, deadline_in_s, notice, rebalance (aws), maintenance (gcp),\n"
      "event_type, other_vm_only (azure). Runs until SIGINT/SIGTERM; exit 0.");
  cmd->callback([flags, &exit_code] { exit_code = RunMockMetadata(*flags); });
}

}  // namespace spotvisor::cli
