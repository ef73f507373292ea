// compat_check runs the wrapper of compat.c against fakeplugin.c and prints "ok" or what
// failed. Built and run by TestWrapperPadsArguments.
#include <stdio.h>
#include <string.h>
#include "../compat.h"

extern size_t fake_seen_size, fake_seen_options_size;
extern int fake_tail_nonzero;

typedef void *(*fn)(void *);

int main(int argc, char **argv) {
	stx_plugin_info info;
	stx_plugin_open(argv[1], &info);
	if (info.api == NULL) { printf("open: %s\n", info.err); return 1; }
	fn *orig = (fn *)((char *)info.api + 40);
	size_t args[6] = {48, 0, 0, 0, 0, 0};
	if (orig[10](args) == NULL) { printf("the fake plugin accepted a small struct unwrapped\n"); return 1; }
	void *wrapped = stx_plugin_wrap(info.api, info.struct_size, 120, 256, 55, 24);
	if (wrapped == NULL) { printf("wrap failed\n"); return 1; }
	fn *w = (fn *)((char *)wrapped + 40);
	memset(args, 0, sizeof(args));
	args[0] = 48;
	args[2] = 7;
	if (w[10](args) != NULL) { printf("client_create through the wrapper failed (saw size %zu)\n", fake_seen_size); return 1; }
	if (fake_seen_size != 48 + 256) { printf("saw size %zu, want %d\n", fake_seen_size, 48 + 256); return 1; }
	if (args[0] != 48 || args[2] != 7 || args[5] != 4242) {
		printf("caller's struct after the call: size %zu, input %zu, output %zu\n", args[0], args[2], args[5]);
		return 1;
	}
	size_t options[4] = {32, 0, 0, 0};
	size_t exec[6] = {48, 0, 0, (size_t)options, 0, 0};
	if (w[55](exec) != NULL) { printf("execute through the wrapper failed (options size %zu)\n", fake_seen_options_size); return 1; }
	if (fake_seen_options_size != 32 + 256 || exec[3] != (size_t)options || options[0] != 32) {
		printf("execute: options size seen %zu; caller's options pointer kept: %d\n", fake_seen_options_size, exec[3] == (size_t)options);
		return 1;
	}
	if (fake_tail_nonzero) { printf("the padding was not zero\n"); return 1; }
	if (stx_plugin_calls() != 2) { printf("wrapped calls %ld, want 2\n", stx_plugin_calls()); return 1; }
	// Slots past the caller's header and the void-returning error slots are left as they were.
	if (w[0] != orig[0] || w[1] != orig[1] || w[125] != orig[125]) { printf("slots that must stay direct were wrapped\n"); return 1; }
	printf("ok\n");
	return 0;
}
