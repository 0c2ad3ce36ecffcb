/* Compiles include/tern/tern.h alone as strict C (see meson.build for the
 * standards and flags): it must need nothing else and use nothing C lacks. */
#include "tern/tern.h"

/* Every typedef is usable from C as declared. */
uint32_t tern_header_check_c(const tern_call* c);
uint32_t tern_header_check_c(const tern_call* c) { return c->prog; }
