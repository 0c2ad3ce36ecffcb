#include "base/version.h"

// Compiled into the library, so these report the library's version even when
// the program's headers are from another one.
extern "C" const char* tern_version(void) { return TERN_VERSION_STRING; }
extern "C" unsigned tern_version_number(void) { return TERN_VERSION_NUMBER; }
