// kv.h: the hook on PJRT_Client_Create that hands a plugin stx's key-value store.
//
// A PJRT client spans several processes when PJRT_Client_Create gets key-value callbacks
// (get, try-get, put) through which the processes' clients exchange their topology and their
// collectives' ids. go-xla leaves them empty, and creates the client itself; so stx registers
// with go-xla a copy of the plugin's API table whose PJRT_Client_Create slot first fills the
// callbacks in (when stx_kv_enable(1)), calling back into Go (kv.go), and after a creation
// records the new client's process index and device counts.
#ifndef STX_XLAPLUGIN_KV_H
#define STX_XLAPLUGIN_KV_H

#include <stddef.h>

#define STX_MAX_HOOKED 8

typedef struct {
	long created;       // clients created through hooked tables so far
	int process_index;  // the last client's PJRT_Client_ProcessIndex
	long devices;       // its PJRT_Client_Devices count (every process's devices)
	long addressable;   // its PJRT_Client_AddressableDevices count (this process's)
} stx_client_topology;

// stx_plugin_hook returns a copy of the API table api (struct_size bytes) with the hook in its
// PJRT_Client_Create slot; NULL when the table is too small or STX_MAX_HOOKED tables are in use.
void *stx_plugin_hook(void *api, size_t struct_size);

// stx_kv_enable turns the callbacks on (1) or off (0) for the clients created from now on.
void stx_kv_enable(int on);

// stx_kv_calls counts the callbacks the plugins made.
long stx_kv_calls(void);

// stx_last_client copies what is known of the last client created.
void stx_last_client(stx_client_topology *out);

#endif
