//go:build ((linux && amd64) || darwin) && !noxla && cgo

// compat.c: see compat.h. Written from the PJRT C API's documented compatibility rules: a
// plugin accepts an argument struct whose struct_size is at least its own and reads the fields
// it knows; fields a caller does not know are left zero, which the API defines as their default.
#include "compat.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

// The first two slots (PJRT_Error_Destroy, PJRT_Error_Message) return void and are never
// wrapped; every other function returns a PJRT_Error*.
#define FIRST_WRAPPED_SLOT 2
// The largest argument struct the wrapper copies; larger ones (none in the C API) go through
// unpadded.
#define MAX_ARGS 1024
#define MAX_PAD 1024

typedef void *(*pjrt_fn)(void *);

typedef struct {
	pjrt_fn orig[STX_MAX_SLOTS];
	size_t pad;
	int execute_slot;
	size_t options_offset;
} wrapped_api;

static wrapped_api wrapped[STX_MAX_WRAPPED];
static atomic_int wrapped_count;
static atomic_long calls;

void stx_plugin_open(const char *path, stx_plugin_info *out) {
	memset(out, 0, sizeof(*out));
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(out->err, sizeof(out->err), "%s", dlerror());
		return;
	}
	void *(*get)(void) = (void *(*)(void))dlsym(h, "GetPjrtApi");
	if (get == NULL) {
		snprintf(out->err, sizeof(out->err), "no GetPjrtApi symbol: not a PJRT plugin (%s)", dlerror());
		return;
	}
	void *api = get();
	if (api == NULL) {
		snprintf(out->err, sizeof(out->err), "GetPjrtApi returned NULL");
		return;
	}
	out->api = api;
	out->struct_size = *(size_t *)api;
	if (out->struct_size >= 40) {
		const int *version = (const int *)((const char *)api + 32);
		out->major = version[0];
		out->minor = version[1];
	}
}

// padded copies a struct that starts with struct_size into buf, zero-padded by pad bytes, and
// returns its old size (0 when it is left as it is).
static size_t padded(const void *args, unsigned char *buf, size_t pad) {
	size_t size = *(const size_t *)args;
	if (size < sizeof(size_t) || size > MAX_ARGS) {
		return 0;
	}
	memset(buf, 0, size + pad);
	memcpy(buf, args, size);
	*(size_t *)buf = size + pad;
	return size;
}

static void *call(int k, int slot, void *args) {
	wrapped_api *w = &wrapped[k];
	pjrt_fn fn = w->orig[slot];
	if (args == NULL) {
		return fn(args);
	}
	_Alignas(16) unsigned char buf[MAX_ARGS + MAX_PAD];
	size_t size = padded(args, buf, w->pad);
	if (size == 0) {
		return fn(args);
	}
	atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
	_Alignas(16) unsigned char options[MAX_ARGS + MAX_PAD];
	void *callerOptions = NULL;
	if (slot == w->execute_slot && size >= w->options_offset + sizeof(void *)) {
		memcpy(&callerOptions, buf + w->options_offset, sizeof(void *));
		if (callerOptions != NULL && padded(callerOptions, options, w->pad) != 0) {
			void *p = options;
			memcpy(buf + w->options_offset, &p, sizeof(void *));
		}
	}
	void *err = fn(buf);
	// The outputs go back into the caller's struct, as far as the caller knows it; its
	// struct_size and its own options pointer stay as they were.
	memcpy((unsigned char *)args + sizeof(size_t), buf + sizeof(size_t), size - sizeof(size_t));
	if (callerOptions != NULL) {
		memcpy((unsigned char *)args + w->options_offset, &callerOptions, sizeof(void *));
	}
	return err;
}

// One trampoline per (wrapper, slot): C has no closures, so the slot is in the function.
#define T(k, s) \
	static void *t_##k##_##s(void *a) { return call(k, s, a); }
#define T10(k, d) T(k, d##0) T(k, d##1) T(k, d##2) T(k, d##3) T(k, d##4) T(k, d##5) T(k, d##6) T(k, d##7) T(k, d##8) T(k, d##9)
#define TK(k)                                                                                      \
	T(k, 0) T(k, 1) T(k, 2) T(k, 3) T(k, 4) T(k, 5) T(k, 6) T(k, 7) T(k, 8) T(k, 9) T10(k, 1) T10(k, 2) \
	T10(k, 3) T10(k, 4) T10(k, 5) T10(k, 6) T10(k, 7) T10(k, 8) T10(k, 9) T10(k, 10) T10(k, 11)         \
	T(k, 120) T(k, 121) T(k, 122) T(k, 123) T(k, 124) T(k, 125) T(k, 126) T(k, 127)
TK(0)
TK(1)
TK(2)
TK(3)

#define P(k, s) t_##k##_##s,
#define P10(k, d) P(k, d##0) P(k, d##1) P(k, d##2) P(k, d##3) P(k, d##4) P(k, d##5) P(k, d##6) P(k, d##7) P(k, d##8) P(k, d##9)
#define PK(k)                                                                                      \
	{P(k, 0) P(k, 1) P(k, 2) P(k, 3) P(k, 4) P(k, 5) P(k, 6) P(k, 7) P(k, 8) P(k, 9) P10(k, 1) P10(k, 2) \
	 P10(k, 3) P10(k, 4) P10(k, 5) P10(k, 6) P10(k, 7) P10(k, 8) P10(k, 9) P10(k, 10) P10(k, 11)         \
	 P(k, 120) P(k, 121) P(k, 122) P(k, 123) P(k, 124) P(k, 125) P(k, 126) P(k, 127)}
static const pjrt_fn trampolines[STX_MAX_WRAPPED][STX_MAX_SLOTS] = {PK(0), PK(1), PK(2), PK(3)};

#define FIRST_SLOT_OFFSET 40

void *stx_plugin_wrap(void *api, size_t struct_size, int slots, size_t pad, int execute_slot, size_t options_offset) {
	if (slots > STX_MAX_SLOTS || pad > MAX_PAD || struct_size < FIRST_SLOT_OFFSET + (size_t)slots * sizeof(void *)) {
		return NULL;
	}
	int k = atomic_fetch_add(&wrapped_count, 1);
	if (k >= STX_MAX_WRAPPED) {
		return NULL;
	}
	static _Alignas(16) unsigned char tables[STX_MAX_WRAPPED][4096];
	if (struct_size > sizeof(tables[k])) {
		return NULL;
	}
	unsigned char *table = tables[k];
	memcpy(table, api, struct_size);
	wrapped_api *w = &wrapped[k];
	w->pad = pad;
	w->execute_slot = execute_slot;
	w->options_offset = options_offset;
	pjrt_fn *fns = (pjrt_fn *)(table + FIRST_SLOT_OFFSET);
	for (int s = FIRST_WRAPPED_SLOT; s < slots; s++) {
		if (fns[s] == NULL) {
			continue;
		}
		w->orig[s] = fns[s];
		fns[s] = trampolines[k][s];
	}
	return table;
}

long stx_plugin_calls(void) { return atomic_load(&calls); }
