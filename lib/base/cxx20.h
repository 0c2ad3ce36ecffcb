// Tern's C++ headers are C++20 (std::span, concepts, designated
// initializers). A C++17 consumer would otherwise meet a raw error deep in a
// header ("'span' in namespace 'std' does not name a template type"); this
// says what to do instead. The C API (include/tern/tern.h) has no such need.
#pragma once

#if defined(__cplusplus) && __cplusplus < 202002L
#error "Tern's C++ headers need C++20: compile with -std=c++20 (or newer); from C or older C++, use the C API, <tern/tern.h>"
#endif
