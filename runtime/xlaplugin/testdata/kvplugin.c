// A stand-in PJRT plugin for the tests of the key-value hook: its PJRT_Client_Create does what
// a GPU plugin's does with node_id, num_nodes and the key-value callbacks (each node puts its
// "topology" and reads every other node's, waiting for them), and checks the store's answers:
// a try-get of a missing key must be NOT_FOUND (5), a get that times out DEADLINE_EXCEEDED (4).
// Its client then lists one device per node, of which its own is addressable. Built with
// -DMINOR=<PJRT minor version>.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLOTS 130

typedef void *(*fn)(void *);

static struct {
	size_t struct_size;
	void *extension_start;
	struct { size_t struct_size; void *priv; int major, minor; } version;
	fn fns[SLOTS];
} api;

typedef struct { int code; char msg[512]; } fake_error;

static void *new_error(int code, const char *msg, size_t size) {
	fake_error *e = calloc(1, sizeof(*e));
	e->code = code;
	snprintf(e->msg, sizeof(e->msg), "%.*s", (int)size, msg);
	return e;
}
static void *errorf(const char *format, const char *a, long b) {
	char msg[512];
	snprintf(msg, sizeof(msg), format, a, b);
	return new_error(13, msg, strlen(msg));
}
static void *callback_error(int code, const char *msg, size_t size) { return new_error(code, msg, size); }
static void *(*callback_error_ptr)(int, const char *, size_t) = callback_error;

static void *ok(void *args) { return NULL; }
static void error_destroy(void *args) { free(((void **)args)[2]); }
static void error_message(void *args) {
	fake_error *e = ((void **)args)[2];
	((const char **)args)[3] = e->msg;
	((size_t *)args)[4] = strlen(e->msg);
}
static void *error_code(void *args) {
	fake_error *e = ((void **)args)[2];
	*(int *)((char *)args + 24) = e->code;
	return NULL;
}

typedef struct {
	size_t struct_size;
	void *extension_start;
	const char *name;
	size_t name_size;
	int type;
	union { const char *s; int64_t i; } value;
	size_t value_size;
} named_value;

typedef struct {
	size_t struct_size;
	void *extension_start;
	const named_value *options;
	size_t num_options;
	fn kv_get;
	void *kv_get_user_arg;
	fn kv_put;
	void *kv_put_user_arg;
	void *client;
	fn kv_try_get;
	void *kv_try_get_user_arg;
} create_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	const char *key;
	size_t key_size;
	int timeout_in_ms;
	void *callback_error;
	void *user_arg;
	char *value;
	size_t value_size;
	void (*deleter)(char *);
} get_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	const char *key;
	size_t key_size;
	void *callback_error;
	void *user_arg;
	char *value;
	size_t value_size;
	void (*deleter)(char *);
} try_get_args;

typedef struct {
	size_t struct_size;
	void *extension_start;
	const char *key;
	size_t key_size;
	const char *value;
	size_t value_size;
	void *callback_error;
	void *user_arg;
} put_args;

typedef struct { long node, nodes; } fake_client;
static char devices[64];
static void *device_list[64];

static long option(const create_args *a, const char *name, long def) {
	for (size_t i = 0; i < a->num_options; i++) {
		const named_value *v = &a->options[i];
		if (v->name_size == strlen(name) && memcmp(v->name, name, v->name_size) == 0) return (long)v->value.i;
	}
	return def;
}

// expect_code checks that a callback failed with code, and destroys its error.
static void *expect_code(void *err, int code, const char *what) {
	if (err == NULL) return errorf("fake plugin: %s succeeded%.0ld", what, 0);
	int got = ((fake_error *)err)->code;
	free(err);
	if (got != code) return errorf("fake plugin: %s failed with code %ld", what, got);
	return NULL;
}

static void *client_create(void *p) {
	create_args *a = p;
	if (a->kv_get == NULL || a->kv_put == NULL || a->kv_try_get == NULL) {
		return errorf("fake plugin: no key-value callbacks%s%.0ld", "", 0);
	}
	long node = option(a, "node_id", 0), nodes = option(a, "num_nodes", 1);
	if (nodes < 1 || nodes > 64 || node < 0 || node >= nodes) return errorf("fake plugin: node %s%ld", "", node);
	char key[64], value[64];
	snprintf(key, sizeof(key), "fake/node/%ld", node);
	snprintf(value, sizeof(value), "topology of node %ld", node);
	put_args put = {sizeof(put), NULL, key, strlen(key), value, strlen(value), &callback_error_ptr, a->kv_put_user_arg};
	void *err = a->kv_put(&put);
	if (err != NULL) return err;
	for (long j = 0; j < nodes; j++) {
		snprintf(key, sizeof(key), "fake/node/%ld", j);
		snprintf(value, sizeof(value), "topology of node %ld", j);
		get_args get = {sizeof(get), NULL, key, strlen(key), 5000, &callback_error_ptr, a->kv_get_user_arg};
		if ((err = a->kv_get(&get)) != NULL) return err;
		int same = get.value_size == strlen(value) && memcmp(get.value, value, get.value_size) == 0;
		get.deleter(get.value);
		if (!same) return errorf("fake plugin: wrong value for %s%.0ld", key, 0);
	}
	try_get_args try = {sizeof(try), NULL, "fake/missing", 12, &callback_error_ptr, a->kv_try_get_user_arg};
	if ((err = expect_code(a->kv_try_get(&try), 5, "try-get of a missing key")) != NULL) return err;
	get_args late = {sizeof(late), NULL, "fake/never", 10, 30, &callback_error_ptr, a->kv_get_user_arg};
	if ((err = expect_code(a->kv_get(&late), 4, "get of a key never put")) != NULL) return err;
	fake_client *c = malloc(sizeof(*c));
	c->node = node;
	c->nodes = nodes;
	a->client = c;
	return NULL;
}

static void *process_index(void *args) {
	fake_client *c = ((void **)args)[2];
	*(int *)((char *)args + 24) = (int)c->node;
	return NULL;
}

static void *client_devices(void *args) {
	fake_client *c = ((void **)args)[2];
	((void **)args)[3] = device_list;
	((size_t *)args)[4] = (size_t)c->nodes;
	return NULL;
}

static void *addressable_devices(void *args) {
	fake_client *c = ((void **)args)[2];
	((void **)args)[3] = &device_list[c->node];
	((size_t *)args)[4] = 1;
	return NULL;
}

void *GetPjrtApi(void) {
	api.struct_size = sizeof(api);
	api.version.struct_size = sizeof(api.version);
	api.version.major = 0;
	api.version.minor = MINOR;
	for (int i = 0; i < SLOTS; i++) api.fns[i] = ok;
	for (int i = 0; i < 64; i++) device_list[i] = &devices[i];
	api.fns[0] = (fn)error_destroy;
	api.fns[1] = (fn)error_message;
	api.fns[2] = error_code;
	api.fns[10] = client_create;
	api.fns[13] = process_index;
	api.fns[15] = client_devices;
	api.fns[16] = addressable_devices;
	return &api;
}
