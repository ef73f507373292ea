// A stand-in PJRT plugin for the tests of the compatibility wrapper: it exports GetPjrtApi
// with the PJRT version given by -DMINOR and, like real plugins, rejects argument structs
// smaller than the sizes it was "built" with (the caller's size + NEED_EXTRA bytes).
#include <stddef.h>
#include <string.h>

#define SLOTS 130
#define NEED_EXTRA 16
#define CLIENT_CREATE_SLOT 10
#define EXECUTE_SLOT 55

typedef void *(*fn)(void *);

static struct {
	size_t struct_size;
	void *extension_start;
	struct { size_t struct_size; void *priv; int major, minor; } version;
	fn fns[SLOTS];
} api;

static char error_object; // any non-NULL pointer is an error
size_t fake_seen_size, fake_seen_options_size;
int fake_tail_nonzero;

static void *ok(void *args) { return NULL; }
static void error_destroy(void *args) {}
static void error_message(void *args) {
	static const char msg[] = "fake plugin: argument struct too small";
	((const char **)args)[3] = msg;
	((size_t *)args)[4] = sizeof(msg) - 1;
}

// The caller's structs are 48 bytes here (the harness's choice); the plugin wants 64.
static void *client_create(void *args) {
	size_t size = *(size_t *)args;
	fake_seen_size = size;
	if (size < 48 + NEED_EXTRA) return &error_object;
	unsigned char *b = args;
	for (size_t i = 48; i < size; i++) fake_tail_nonzero |= b[i];
	((size_t *)args)[5] = 4242; // an output field the caller knows (offset 40)
	((size_t *)args)[6] = 99;   // an output field only the plugin knows (offset 48)
	return NULL;
}

static void *execute(void *args) {
	size_t size = *(size_t *)args;
	void *options = ((void **)args)[3]; // offset 24
	size_t osize = *(size_t *)options;
	fake_seen_size = size;
	fake_seen_options_size = osize;
	if (size < 48 + NEED_EXTRA || osize < 32 + NEED_EXTRA) return &error_object;
	unsigned char *o = options;
	for (size_t i = 32; i < osize; i++) fake_tail_nonzero |= o[i];
	return NULL;
}

void *GetPjrtApi(void) {
	api.struct_size = sizeof(api);
	api.version.struct_size = sizeof(api.version);
	api.version.major = 0;
	api.version.minor = MINOR;
	for (int i = 0; i < SLOTS; i++) api.fns[i] = ok;
	api.fns[0] = (fn)error_destroy;
	api.fns[1] = (fn)error_message;
	api.fns[CLIENT_CREATE_SLOT] = client_create;
	api.fns[EXECUTE_SLOT] = execute;
	return &api;
}
