//go:build ((linux && amd64) || darwin) && !noxla && cgo

// kv.c: see kv.h. The PJRT structs are declared here with the layouts of the PJRT C API
// header (PJRT 0.83, the same in every later version: structs only grow at their end).
#include "kv.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_cgo_export.h"

typedef void *(*pjrt_fn)(void *);
// PJRT_CallbackError: makes the plugin's own PJRT_Error from a code and a message.
typedef void *(*callback_error_fn)(int code, const char *message, size_t message_size);

typedef struct {
	size_t struct_size;
	void *extension_start;
	const char *key;
	size_t key_size;
	int timeout_in_ms;
	callback_error_fn *callback_error;
	void *user_arg;
	char *value;                     // out
	size_t value_size;               // out
	void (*value_deleter)(char *); // out
} kv_get_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	const char *key;
	size_t key_size;
	callback_error_fn *callback_error;
	void *user_arg;
	char *value;                     // out
	size_t value_size;               // out
	void (*value_deleter)(char *); // out
} kv_try_get_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	const char *key;
	size_t key_size;
	const char *value;
	size_t value_size;
	callback_error_fn *callback_error;
	void *user_arg;
} kv_put_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	const void *create_options;
	size_t num_options;
	void *kv_get_callback;
	void *kv_get_user_arg;
	void *kv_put_callback;
	void *kv_put_user_arg;
	void *client; // out
	void *kv_try_get_callback;
	void *kv_try_get_user_arg;
} client_create_args;

// The client queries made after a creation: {struct_size, extension_start, client, outputs}.
typedef struct {
	size_t struct_size;
	void *extension_start;
	void *client;
	int process_index;
} process_index_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	void *client;
	void *const *devices;
	size_t num_devices;
} devices_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	void *error;
} error_destroy_args;

// Slots of the PJRT_Api function table (fixed: the API only appends).
enum {
	SLOT_ERROR_DESTROY = 0,
	SLOT_CLIENT_CREATE = 10,
	SLOT_CLIENT_PROCESS_INDEX = 13,
	SLOT_CLIENT_DEVICES = 15,
	SLOT_CLIENT_ADDRESSABLE_DEVICES = 16,
	FIRST_SLOT_OFFSET = 40,
};
// PJRT_Error_Code values (absl's status codes).
enum { CODE_DEADLINE_EXCEEDED = 4, CODE_NOT_FOUND = 5 };

static atomic_int kv_enabled;
static atomic_long kv_calls;
static stx_client_topology last_client;
static atomic_flag last_lock = ATOMIC_FLAG_INIT;

void stx_kv_enable(int on) { atomic_store(&kv_enabled, on); }
long stx_kv_calls(void) { return atomic_load(&kv_calls); }

void stx_last_client(stx_client_topology *out) {
	while (atomic_flag_test_and_set(&last_lock)) {
	}
	*out = last_client;
	atomic_flag_clear(&last_lock);
}

static void free_value(char *value) { free(value); }

// to_error turns a Go callback's result into the plugin's error (NULL: success); message is
// malloc'ed by Go and freed here.
static void *to_error(callback_error_fn *make, int code, char *message) {
	if (code == 0) {
		return NULL;
	}
	void *err = (*make)(code, message, message ? strlen(message) : 0);
	free(message);
	return err;
}

static void *kv_get(void *p) {
	kv_get_args *a = p;
	atomic_fetch_add(&kv_calls, 1);
	char *msg = NULL;
	int code = stxKVGet((char *)a->key, a->key_size, 0, a->timeout_in_ms, &a->value, &a->value_size, &msg);
	a->value_deleter = free_value;
	return to_error(a->callback_error, code, msg);
}

static void *kv_try_get(void *p) {
	kv_try_get_args *a = p;
	atomic_fetch_add(&kv_calls, 1);
	char *msg = NULL;
	int code = stxKVGet((char *)a->key, a->key_size, 1, 0, &a->value, &a->value_size, &msg);
	a->value_deleter = free_value;
	return to_error(a->callback_error, code, msg);
}

static void *kv_put(void *p) {
	kv_put_args *a = p;
	atomic_fetch_add(&kv_calls, 1);
	char *msg = NULL;
	int code = stxKVPut((char *)a->key, a->key_size, (char *)a->value, a->value_size, &msg);
	return to_error(a->callback_error, code, msg);
}

typedef struct {
	pjrt_fn *table; // the hooked copy of the API table
	pjrt_fn create; // the PJRT_Client_Create it replaced
} hooked_api;

static hooked_api hooked[STX_MAX_HOOKED];
static atomic_int hooked_count;

// query calls one of the client queries through the hooked table; a failure leaves the
// outputs zero (the error is destroyed).
static void query(int k, int slot, void *args) {
	void *err = hooked[k].table[slot](args);
	if (err != NULL) {
		error_destroy_args d = {sizeof(d), NULL, err};
		((void (*)(void *))hooked[k].table[SLOT_ERROR_DESTROY])(&d);
	}
}

static void *client_create(int k, void *p) {
	client_create_args *a = p;
	if (atomic_load(&kv_enabled)) {
		// A caller's struct that ends before a field cannot carry it (go-xla's carries all).
		if (a->struct_size >= offsetof(client_create_args, kv_put_user_arg) + sizeof(void *)) {
			a->kv_get_callback = (void *)kv_get;
			a->kv_put_callback = (void *)kv_put;
			a->kv_get_user_arg = a->kv_put_user_arg = NULL;
		}
		if (a->struct_size >= offsetof(client_create_args, kv_try_get_user_arg) + sizeof(void *)) {
			a->kv_try_get_callback = (void *)kv_try_get;
			a->kv_try_get_user_arg = NULL;
		}
	}
	void *err = hooked[k].create(p);
	if (err != NULL || a->client == NULL) {
		return err;
	}
	process_index_args pi = {sizeof(pi), NULL, a->client, 0};
	devices_args all = {sizeof(all), NULL, a->client, NULL, 0};
	devices_args local = {sizeof(local), NULL, a->client, NULL, 0};
	query(k, SLOT_CLIENT_PROCESS_INDEX, &pi);
	query(k, SLOT_CLIENT_DEVICES, &all);
	query(k, SLOT_CLIENT_ADDRESSABLE_DEVICES, &local);
	while (atomic_flag_test_and_set(&last_lock)) {
	}
	last_client.created++;
	last_client.process_index = pi.process_index;
	last_client.devices = (long)all.num_devices;
	last_client.addressable = (long)local.num_devices;
	atomic_flag_clear(&last_lock);
	return NULL;
}

#define H(k) \
	static void *create_##k(void *a) { return client_create(k, a); }
H(0) H(1) H(2) H(3) H(4) H(5) H(6) H(7)
static const pjrt_fn creates[STX_MAX_HOOKED] = {create_0, create_1, create_2, create_3, create_4, create_5, create_6, create_7};

void *stx_plugin_hook(void *api, size_t struct_size) {
	size_t need = FIRST_SLOT_OFFSET + (SLOT_CLIENT_ADDRESSABLE_DEVICES + 1) * sizeof(void *);
	static _Alignas(16) unsigned char tables[STX_MAX_HOOKED][4096];
	if (struct_size < need || struct_size > sizeof(tables[0])) {
		return NULL;
	}
	int k = atomic_fetch_add(&hooked_count, 1);
	if (k >= STX_MAX_HOOKED) {
		return NULL;
	}
	memcpy(tables[k], api, struct_size);
	pjrt_fn *fns = (pjrt_fn *)(tables[k] + FIRST_SLOT_OFFSET);
	hooked[k].table = fns;
	hooked[k].create = fns[SLOT_CLIENT_CREATE];
	fns[SLOT_CLIENT_CREATE] = creates[k];
	return tables[k];
}
