// This machine's names: the short one (gethostname) and the canonical one peers resolve
// (as `hostname -f`: a Kubernetes pod's `<host>.<subdomain>.<namespace>.svc…`).
#pragma once

#include <string>

namespace spotvisor::util {

// gethostname(); "" when it fails.
std::string ShortHostName();

// The canonical name of ShortHostName() through the resolver (getaddrinfo with
// AI_CANONNAME: /etc/hosts first on a usual nsswitch); the short name when it does not
// resolve, "" when there is none.
std::string CanonicalHostName();

}  // namespace spotvisor::util
