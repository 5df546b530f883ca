// The spotvisor binary: everything lives in the library; see src/cli/.
#include "spotvisor/cli/app.hpp"

int main(int argc, char** argv) { return spotvisor::cli::Main(argc, argv); }
