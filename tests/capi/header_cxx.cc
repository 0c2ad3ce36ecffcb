// Compiles include/tern/tern.h alone as strict C++ (see meson.build): the
// extern "C" guards and nothing C++ rejects.
#include "tern/tern.h"

static_assert(noexcept(tern_engine_poll(nullptr)), "the C API is noexcept from C++");
uint32_t tern_header_check_cxx(const tern_call* c);
uint32_t tern_header_check_cxx(const tern_call* c) { return c->prog; }
