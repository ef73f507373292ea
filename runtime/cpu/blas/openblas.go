//go:build cgo && !noopenblas

package blas

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

typedef void (*sgemm_fn)(int order, int transA, int transB, int m, int n, int k,
	float alpha, const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc);
typedef char *(*config_fn)(void);
typedef int (*threads_fn)(void);
typedef void (*set_threads_fn)(int);

static sgemm_fn stx_sgemm;
static config_fn stx_config;
static threads_fn stx_threads;

// stx_blas_open tries each name in turn; returns 0 on success.
static int stx_blas_open(const char *name) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (!h) return 1;
	stx_sgemm = (sgemm_fn)dlsym(h, "cblas_sgemm");
	if (!stx_sgemm) { dlclose(h); return 2; }
	stx_config = (config_fn)dlsym(h, "openblas_get_config");
	stx_threads = (threads_fn)dlsym(h, "openblas_get_num_threads");
	// stx splits large products across goroutines itself (Sgemm): OpenBLAS's own threads cost
	// more than they give on the small products of decoding (measured 2.5x slower at M=8).
	set_threads_fn set = (set_threads_fn)dlsym(h, "openblas_set_num_threads");
	if (set) set(1);
	return 0;
}

static const char *stx_blas_config(void) { return stx_config ? stx_config() : ""; }
static int stx_blas_threads(void) { return stx_threads ? stx_threads() : 0; }

static void stx_blas_sgemm(int transA, int transB, int m, int n, int k, float alpha,
	const float *a, int lda, const float *b, int ldb, float beta, float *c, int ldc) {
	// 101 = CblasRowMajor, 111 = CblasNoTrans, 112 = CblasTrans.
	stx_sgemm(101, transA ? 112 : 111, transB ? 112 : 111, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
*/
import "C"

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"
)

// CompiledIn says whether this binary can use OpenBLAS (cgo, no noopenblas tag).
const CompiledIn = true

// libraryNames are tried in order: the versioned name is what runtime packages install
// (Debian libopenblas0), the bare name what -dev packages add.
var libraryNames = []string{"libopenblas.so.0", "libopenblas.so", "libopenblas.dylib", "libopenblas64_.so.0"}

var load = sync.OnceValues(func() (string, error) {
	for _, name := range libraryNames {
		cname := C.CString(name)
		rc := C.stx_blas_open(cname)
		C.free(unsafe.Pointer(cname))
		if rc == 0 {
			cfg := strings.TrimSpace(C.GoString(C.stx_blas_config()))
			return fmt.Sprintf("%s (%s, %d threads)", name, cfg, int(C.stx_blas_threads())), nil
		}
	}
	return "", fmt.Errorf("OpenBLAS not found (tried %s); install it (Debian: apt-get install libopenblas0)",
		strings.Join(libraryNames, ", "))
})

// Available reports whether OpenBLAS was loaded; the first call loads it.
func Available() bool {
	_, err := load()
	return err == nil
}

// Name describes the GEMM in use: the OpenBLAS library and its configuration, or why it is
// not used.
func Name() string {
	name, err := load()
	if err != nil {
		return "pure Go (" + err.Error() + ")"
	}
	return name
}

func openblasSgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	C.stx_blas_sgemm(cbool(transA), cbool(transB), C.int(m), C.int(n), C.int(k), C.float(alpha),
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda), (*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		C.float(beta), (*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}
