// compat.h: loading a PJRT plugin and wrapping its API table for a caller compiled against an
// older PJRT C header. Only the layout facts the PJRT C API documents as stable are used: the
// PJRT_Api table and every argument struct start with `size_t struct_size`; PJRT_Api's version
// sits at offset 16 ({struct_size, priv, int major, int minor}); its function pointers start at
// offset 40 and are only ever appended; every function takes one pointer to its argument struct.
#ifndef STX_XLAPLUGIN_COMPAT_H
#define STX_XLAPLUGIN_COMPAT_H

#include <stddef.h>

typedef struct {
	void *api;          // the plugin's PJRT_Api*
	size_t struct_size; // PJRT_Api.struct_size
	int major, minor;   // PJRT_Api.pjrt_api_version
	char err[512];      // dlopen/dlsym error, when api is NULL
} stx_plugin_info;

// stx_plugin_open dlopens path and calls its GetPjrtApi; it never unloads the library.
void stx_plugin_open(const char *path, stx_plugin_info *out);

// stx_plugin_wrap returns a copy of api (struct_size bytes) whose first `slots` functions
// (the ones a caller compiled against a header with that many can call) pass their argument
// structs zero-padded by `pad` bytes, with struct_size raised to match. It returns NULL when
// no wrapper slot is left (a process wraps at most STX_MAX_WRAPPED plugins) or slots is too
// large. `execute_slot` is the slot of PJRT_LoadedExecutable_Execute, whose nested
// PJRT_ExecuteOptions (at `options_offset` in its argument struct) is padded too.
void *stx_plugin_wrap(void *api, size_t struct_size, int slots, size_t pad, int execute_slot, size_t options_offset);

// stx_plugin_calls counts the calls that went through wrapped slots (for tests).
long stx_plugin_calls(void);

#define STX_MAX_WRAPPED 4
#define STX_MAX_SLOTS 128

#endif
