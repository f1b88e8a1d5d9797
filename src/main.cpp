#include "cli/main.hpp"

int main(int argc, char** argv) { return rlock::cli::main(argc, argv); }
