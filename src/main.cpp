// The spotvisor binary: everything lives in the library; see src/cli/.
#include "spotvisor/cli/app.hpp"

#ifdef SPOTVISOR_STATIC_GLIBC
#include <nss.h>
#endif

int main(int argc, char** argv) {
#ifdef SPOTVISOR_STATIC_GLIBC
  // The portable binary carries its own glibc, which must not load the host's NSS modules
  // (built for another glibc): host names come from /etc/hosts and DNS (resolv.conf), the
  // two sources glibc has built in. Kubernetes, cloud VMs and systemd-resolved (127.0.0.53) all
  // answer through these.
  __nss_configure_lookup("hosts", "files dns");
#endif
  return spotvisor::cli::Main(argc, argv);
}
